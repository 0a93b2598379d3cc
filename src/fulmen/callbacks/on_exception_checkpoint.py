"""``OnExceptionCheckpoint``: save a checkpoint when fit raises, and resume from it on the next fit."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fulmen.callbacks.checkpoint import Checkpoint
from fulmen.utilities import cloud_io
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer import Trainer


class OnExceptionCheckpoint(Checkpoint):
    """Write ``<dirpath>/<filename>.ckpt`` when an exception (or Ctrl-C) ends a run.

    It is a ``Checkpoint``: with it in ``callbacks`` no default ``ModelCheckpoint`` is added, as in Lightning.
    A later ``trainer.fit(model)`` with no ``ckpt_path`` resumes from the file when it exists, and a fit that
    finishes removes it, so a stale file never restarts a finished run.
    """

    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike[str], filename: str = "on_exception") -> None:
        super().__init__()
        if not filename:
            raise ValueError(
                f"OnExceptionCheckpoint(filename={filename!r}): the file name cannot be empty. Pass a name "
                "without the extension, e.g. filename='on_exception'."
            )
        cloud_io.check_reachable(dirpath, "OnExceptionCheckpoint(dirpath)")
        self.dirpath = cloud_io.local(dirpath)
        self.filename = filename

    @property
    def ckpt_path(self) -> str:
        return cloud_io.join(self.dirpath, self.filename + self.FILE_EXTENSION)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        try:
            trainer.save_checkpoint(self.ckpt_path)
        except Exception as err:  # the run's own exception is the one to see; say why no checkpoint exists
            rank_zero_warn(f"OnExceptionCheckpoint could not save {self.ckpt_path!r}: {type(err).__name__}: {err}")
            return
        rank_zero_info(
            f"{type(exception).__name__} ended the run: saved {self.ckpt_path!r}. The next trainer.fit() with "
            "this callback resumes from it."
        )

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit" or trainer.interrupted or not trainer.is_global_zero:
            return
        cloud_io.remove(self.ckpt_path)  # the run finished: the file would restart it by mistake

    def resume_path(self) -> str | None:
        """The file a fit without ``ckpt_path`` resumes from, if one was left by an exception."""
        return self.ckpt_path if cloud_io.exists(self.ckpt_path) else None

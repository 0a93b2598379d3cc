"""How ``ModelCheckpoint`` names its files: a name from the ``filename`` template and the logged values, ``-vN``
added while the name belongs to another file, the last checkpoints found in ``dirpath``, and the default directory.

:class:`CheckpointFileNaming` is a base class of :class:`~fulmen.callbacks.model_checkpoint.ModelCheckpoint`:
its methods (``format_checkpoint_name``, ``file_exists``, ``find_last_checkpoints`` ...) are ModelCheckpoint's
through the base, and subclasses override them as before; the name parts (``CHECKPOINT_JOIN_CHAR`` ...) stay
ModelCheckpoint's own class attributes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fulmen.checkpoint import sharded as distributed_checkpoint
from fulmen.utilities import cloud_io

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer

_FIELD = re.compile(r"\{([^{}:]+)(?::[^{}]*)?\}")


class CheckpointFileNaming:
    """The file names of a :class:`~fulmen.callbacks.model_checkpoint.ModelCheckpoint` (a base class of it)."""

    CHECKPOINT_JOIN_CHAR: str
    CHECKPOINT_EQUALS_CHAR: str
    CHECKPOINT_NAME_LAST: str
    FILE_EXTENSION: str
    STARTING_VERSION: int
    dirpath: str | None
    filename: str | None
    auto_insert_metric_name: bool
    _enable_version_counter: bool

    def format_checkpoint_name(
        self, metrics: dict[str, Any], filename: str | None = None, ver: int | None = None, prefix: str | None = None
    ) -> str:
        """The file path for ``metrics``: ``'{epoch}-{val_loss:.2f}'`` -> ``epoch=3-val_loss=0.12.ckpt``; a
        ``prefix`` (even ``""``) is joined in front with ``CHECKPOINT_JOIN_CHAR``."""
        name = self._format_template(filename or self.filename, metrics, prefix)
        if ver is not None:
            name = self.CHECKPOINT_JOIN_CHAR.join((name, f"v{ver}"))
        name += self.FILE_EXTENSION
        return cloud_io.join(self.dirpath, name) if self.dirpath else name

    def _format_template(self, template: str | None, metrics: dict[str, Any], prefix: str | None) -> str:
        template = template or "{epoch}" + self.CHECKPOINT_JOIN_CHAR + "{step}"
        names = _FIELD.findall(template)
        if self.auto_insert_metric_name:
            for name in sorted(set(names), key=len, reverse=True):
                template = re.sub(
                    r"\{" + re.escape(name) + r"(?=[:}])",
                    name + self.CHECKPOINT_EQUALS_CHAR + "{" + name,
                    template,
                )
        values: dict[str, Any] = {}
        for i, name in enumerate(names):
            value = metrics.get(name, 0)
            if isinstance(value, torch.Tensor):
                value = value.item()
            key = f"__f{i}"
            values[key] = value
            template = re.sub(r"\{" + re.escape(name) + r"(?=[:}])", "{" + key, template, count=1)
        name = template.format(**values)
        return self.CHECKPOINT_JOIN_CHAR.join((prefix, name)) if prefix is not None else name

    def file_exists(self, filepath: str | Path, trainer: Trainer) -> bool:
        """Whether ``filepath`` exists, as global rank 0 sees it: every rank gets rank 0's answer (a
        collective under several processes), so all of them choose the same file names."""
        local_decision = cloud_io.exists(filepath) if trainer.is_global_zero else False
        return trainer.strategy.reduce_boolean_decision(local_decision, all=False)

    def _versioned_path(
        self, trainer: Trainer, metrics: dict[str, Any], filename: str | None, keep: str | None
    ) -> str:
        """``format_checkpoint_name``, adding ``-vN`` while the name belongs to an unrelated file."""
        path = self.format_checkpoint_name(metrics, filename)
        if not self._enable_version_counter:
            return path
        version = self.STARTING_VERSION
        while self.file_exists(path, trainer) and path != keep:
            path = self.format_checkpoint_name(metrics, filename, ver=version)
            version += 1
        return path

    def find_last_checkpoints(self, trainer: Trainer) -> list[str]:
        """Files named like this callback's last checkpoints in ``dirpath`` (for ``ckpt_path="last"``)."""
        if self.dirpath is None:
            return []
        stem, ext = self.CHECKPOINT_NAME_LAST, self.FILE_EXTENSION
        if not cloud_io.is_remote(self.dirpath):
            distributed_checkpoint.recover_all(self.dirpath)  # a sharded `last` a kill left aside while replacing
        names = [n for n in cloud_io.listdir(self.dirpath)
                 if n.endswith(ext) and stem in n[: -len(ext)] and not n.startswith(".")]  # fmt: skip
        # a sharded checkpoint is a directory; a hidden name is one being written or replaced
        return [p for p in (cloud_io.join(self.dirpath, n) for n in names) if cloud_io.exists(p)]

    def _default_dirpath(self, trainer: Trainer) -> str:
        """``<save_dir>/<name>/<version>/checkpoints`` of the first logger, else ``<default_root_dir>/checkpoints``."""
        if trainer.loggers:
            logger = trainer.loggers[0]
            save_dir = logger.save_dir or trainer.default_root_dir
            version = logger.version
            version = version if isinstance(version, str) else f"version_{version}"
            return cloud_io.join(save_dir, str(logger.name or ""), version, "checkpoints")
        return cloud_io.join(trainer.default_root_dir, "checkpoints")

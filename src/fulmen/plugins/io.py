"""Checkpoint I/O plugins: how the strategy writes, reads and removes checkpoint files.

``Trainer(plugins=[AsyncCheckpointIO()])`` (or any ``CheckpointIO``) replaces the default
``TorchCheckpointIO``; every save (``ModelCheckpoint``, ``trainer.save_checkpoint``, the signal and
exception checkpoints), every load of ``ckpt_path`` and every top-k removal goes through it.
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from fulmen.utilities import checkpoint_io, cloud_io
from fulmen.utilities.apply_func import apply_to_collection
from fulmen.utilities.rank_zero import rank_zero_warn

_Path = str | os.PathLike[str]


class CheckpointIO(ABC):
    """Save, load and remove checkpoint files. Implement all three (``teardown`` is called when a run
    ends)."""

    @abstractmethod
    def save_checkpoint(self, checkpoint: dict[str, Any], path: _Path, storage_options: Any | None = None) -> None:
        """Write ``checkpoint`` to ``path``."""

    @abstractmethod
    def load_checkpoint(self, path: _Path, map_location: Any | None = None, weights_only: bool | None = None) -> dict[str, Any]:
        """Read the checkpoint at ``path``."""

    @abstractmethod
    def remove_checkpoint(self, path: _Path) -> None:
        """Delete the checkpoint at ``path`` (a missing file is not an error)."""

    def teardown(self) -> None:
        """The run ended: finish what is pending."""


class TorchCheckpointIO(CheckpointIO):
    """``torch.save`` / ``torch.load`` through fulmen's safe, atomic checkpoint files (local paths and any
    fsspec URL; a ``.safetensors`` path exports the weights); loading is ``weights_only`` unless told
    otherwise."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: _Path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(
                f"save_checkpoint(storage_options={storage_options!r}): {type(self).__name__} takes no storage "
                "options. Give credentials and endpoints to fsspec (e.g. fsspec.config.conf['s3']), or pass a "
                "CheckpointIO of your own that uses them: Trainer(plugins=[MyCheckpointIO()])."
            )
        path = os.fspath(path)
        if path.endswith(".safetensors"):
            checkpoint_io.save_safetensors(checkpoint, path)
        else:
            checkpoint_io.save(checkpoint, path)

    def load_checkpoint(self, path: _Path, map_location: Any | None = None, weights_only: bool | None = None) -> dict[str, Any]:
        return checkpoint_io.load(path, map_location=map_location, weights_only=weights_only is not False)

    def remove_checkpoint(self, path: _Path) -> None:
        cloud_io.remove(path)


class AsyncCheckpointIO(CheckpointIO):
    """Write checkpoints on a background thread, so training does not wait for the disk or the network.

    - The checkpoint is copied (tensors to host memory) before ``save_checkpoint`` returns: training may
      change the weights right away without changing what is written.
    - Saves and removals run in order on one thread: a rotated-out checkpoint is removed only after the
      checkpoint replacing it is complete (each write is atomic, so the previous file stays loadable until
      then), and not at all if that save failed.
    - A failed save is never lost: its error is raised by the next ``save_checkpoint``, by a load, or when
      the run ends (``teardown``), whichever comes first.
    - Loading waits for pending saves first, so ``ckpt_path="last"`` reads the newest file.
    """

    def __init__(self, checkpoint_io: CheckpointIO | None = None) -> None:
        self.checkpoint_io = checkpoint_io or TorchCheckpointIO()
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future[None]] = []
        self._error: BaseException | None = None
        self._save_failed = False  # once a save failed, nothing more is removed in this run
        self._lock = threading.Lock()

    def _submit(self, removal: bool, fn: Any, *args: Any) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fulmen-checkpoint")
        future = self._executor.submit(self._guarded, removal, fn, *args)
        with self._lock:
            self._pending = [f for f in self._pending if not f.done()] + [future]

    def _guarded(self, removal: bool, fn: Any, *args: Any) -> None:
        if removal and self._save_failed:
            return  # a save before this failed: keep the file it was to replace
        try:
            fn(*args)
        except BaseException as err:  # kept for the training thread: raised there, never swallowed
            self._save_failed = self._save_failed or not removal
            if self._error is None:
                self._error = err

    def _raise_pending_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise RuntimeError(f"An asynchronous checkpoint save failed: {error}") from error

    def wait(self) -> None:
        """Block until every pending save and removal is done; raise the first error."""
        with self._lock:
            pending, self._pending = self._pending, []
        for future in pending:
            future.result()
        self._raise_pending_error()

    def save_checkpoint(self, checkpoint: dict[str, Any], path: _Path, storage_options: Any | None = None) -> None:
        self._raise_pending_error()
        snapshot = apply_to_collection(checkpoint, torch.Tensor, lambda t: t.detach().to("cpu", copy=True))
        self._submit(False, self.checkpoint_io.save_checkpoint, snapshot, path, storage_options)

    def load_checkpoint(self, path: _Path, map_location: Any | None = None, weights_only: bool | None = None) -> dict[str, Any]:
        self.wait()
        return self.checkpoint_io.load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path: _Path) -> None:
        self._submit(True, self.checkpoint_io.remove_checkpoint, path)

    def teardown(self) -> None:
        try:
            self.wait()
        finally:
            self._save_failed = False
            self.checkpoint_io.teardown()
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def __del__(self) -> None:
        if self._pending and any(not f.done() for f in self._pending):
            rank_zero_warn("AsyncCheckpointIO was dropped with saves still running; call teardown() to wait.")

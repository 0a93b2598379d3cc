"""``AsyncCheckpointIO``: checkpoints written on a background thread."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch

from fulmen.plugins.io.checkpoint_plugin import CheckpointIO
from fulmen.plugins.io.wrapper import _WrappingCheckpointIO
from fulmen.utilities.apply_func import apply_to_collection
from fulmen.utilities.rank_zero import rank_zero_warn

_Path = str | os.PathLike[str]


class AsyncCheckpointIO(_WrappingCheckpointIO):
    """Write checkpoints on a background thread, so training does not wait for the disk or the network.

    - The checkpoint is copied (tensors to host memory) before ``save_checkpoint`` returns: training may
      change the weights right away without changing what is written.
    - Saves and removals run in order on one thread: a rotated-out checkpoint is removed only after the
      checkpoint replacing it is complete (each write is atomic, so the previous file stays loadable until
      then), and not at all if that save failed.
    - A failed save is never lost: its error is raised by the next ``save_checkpoint``, by a load, or when
      the run ends (``teardown``), whichever comes first.
    - Loading waits for pending saves first, so ``ckpt_path="last"`` reads the newest file.

    ``checkpoint_io`` is the writer the thread uses (``TorchCheckpointIO`` when not given).
    """

    def __init__(self, checkpoint_io: CheckpointIO | None = None) -> None:
        super().__init__(checkpoint_io)
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
        pending = getattr(self, "_pending", ())
        if pending and any(not f.done() for f in pending):
            rank_zero_warn("AsyncCheckpointIO was dropped with saves still running; call teardown() to wait.")


__all__ = ["AsyncCheckpointIO"]

"""``AsyncCheckpointIO``: checkpoints written on a background thread, one at a time."""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal, NamedTuple

import torch

from fulmen.plugins.io.checkpoint_plugin import CheckpointIO
from fulmen.plugins.io.wrapper import _WrappingCheckpointIO
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.rank_zero import rank_zero_warn

_Path = str | os.PathLike[str]
_BufferKey = tuple[tuple[int, ...], torch.dtype, bool]  # shape, dtype, pinned


_Kind = Literal["save", "removal", "link"]


class _Failure(NamedTuple):
    error: BaseException
    path: str
    kind: _Kind


class AsyncCheckpointIO(_WrappingCheckpointIO):
    """Write checkpoints on a background thread, so training does not wait for the disk or the network.

    - The checkpoint is copied before ``save_checkpoint`` returns (tensors into host memory, everything else
      deep-copied): training may change the weights, and the trainer its dicts, right away without changing
      what is written. The host buffers are kept and reused by the next save of the same shapes, so a save
      blocks training for a memory copy only (pinned memory for CUDA tensors).
    - At most one save is in flight: a save that comes while the previous one is still being written waits for
      it first. Memory holds one host copy of the checkpoint at most, and saves land in order.
    - Saves, removals and links run in order on one thread: a rotated-out checkpoint is removed only after the
      checkpoint replacing it is complete (each write is atomic, so the previous file stays loadable until
      then), and not at all if that save failed; ``save_last="link"`` moves ``last.ckpt`` onto a checkpoint
      only once it is complete, and not at all if it failed.
    - A failed save is never lost: its error is raised by :meth:`raise_failed_save` (the training loop calls it
      through the strategy at every step), by the next ``save_checkpoint``, by a load, or when the run ends
      (``teardown``), whichever comes first.
    - Loading waits for pending saves first, so ``ckpt_path="last"`` reads the newest file.

    ``checkpoint_io`` is the writer the thread uses (``TorchCheckpointIO`` when not given). It must not keep
    the checkpoint's tensors after its ``save_checkpoint`` returned: the next save reuses their memory.
    """

    def __init__(self, checkpoint_io: CheckpointIO | None = None) -> None:
        super().__init__(checkpoint_io)
        self._executor: ThreadPoolExecutor | None = None
        # the last job submitted: one thread runs the jobs in order, so once it is done all of them are
        self._pending: Future[None] | None = None
        self._error: _Failure | None = None  # set by the background thread, raised on the training thread
        self._save_failed = False  # once a save failed, nothing more is removed in this run
        self._host = _HostCopy()

    # -- the background queue ---------------------------------------------------------------------------
    def run_in_background(self, work: Callable[[], object], path: _Path, removal: bool = False) -> None:
        """Run ``work`` on the background thread after everything submitted before it: a save (or with
        ``removal=True`` a removal) of ``path``. Its error is kept and raised as a failed save's. Strategies that
        write checkpoints their own way (sharded checkpoints) hand their background part over through this."""
        self._submit(work, path, "removal" if removal else "save")

    def _submit(self, work: Callable[[], object], path: _Path, kind: _Kind) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fulmen-checkpoint")
        events = self._host.take_events()
        self._pending = self._executor.submit(self._run, work, os.fspath(path), kind, events)

    def _run(self, work: Callable[[], object], path: str, kind: _Kind, events: list[Any]) -> None:
        if kind != "save" and self._save_failed:
            return  # a save before this failed: keep the file it was to replace, and links on complete files
        try:
            for event in events:  # the copies from the GPU into pinned memory have landed
                event.synchronize()
            work()
        except BaseException as err:  # kept for the training thread: raised there, never swallowed
            self._save_failed = self._save_failed or kind == "save"
            if self._error is None:
                self._error = _Failure(err, path, kind)

    def raise_failed_save(self) -> None:
        # one attribute read when nothing failed: the training loop calls this at every step
        if self._error is not None:
            self._raise_error()

    def _raise_error(self) -> None:
        failure, self._error = self._error, None
        if failure is None:
            return
        error = failure.error
        if failure.kind == "removal":
            raise RuntimeError(
                f"An asynchronous checkpoint removal failed: {failure.path!r} was not removed "
                f"({type(error).__name__}: {error})."
            ) from error
        if failure.kind == "link":
            raise RuntimeError(
                f"An asynchronous checkpoint link failed: {failure.path!r} was not moved onto the new checkpoint "
                f"({type(error).__name__}: {error}); it still names the previous one (if any)."
            ) from error
        raise RuntimeError(
            f"An asynchronous checkpoint save failed: {failure.path!r} was not written ({type(error).__name__}: "
            f"{error}). The previous file under that name (if any) is intact, and no checkpoint is removed in this "
            "run any more."
        ) from error

    def wait(self) -> None:
        """Block until every pending save and removal is done; raise the first error."""
        pending = self._pending
        if pending is not None:
            pending.result()  # never raises: each job keeps its error
            if self._pending is pending:
                self._pending = None
        self.raise_failed_save()

    def snapshot(self, checkpoint: dict[str, Any]) -> dict[str, Any]:
        """``checkpoint`` as it is now, for the background thread: tensors copied into this plugin's host
        buffers (those of the previous save when the shapes match), everything else deep-copied. Call
        :meth:`wait` first: the buffers are the previous save's."""
        return self._host.copy(checkpoint)

    # -- CheckpointIO -----------------------------------------------------------------------------------
    def save_checkpoint(self, checkpoint: dict[str, Any], path: _Path, storage_options: Any | None = None) -> None:
        self.wait()  # at most one save in flight: its buffers are free again, and saves land in order
        write = functools.partial(self.checkpoint_io.save_checkpoint, self.snapshot(checkpoint), path, storage_options)
        self.run_in_background(write, path)

    def load_checkpoint(self, path: _Path, map_location: Any | None = None, weights_only: bool | None = None) -> dict[str, Any]:
        """The wrapped writer's ``load_checkpoint``, once the saves in flight are written. Without
        ``map_location`` the wrapped writer's default holds (a ``TorchCheckpointIO`` loads onto the CPU)."""
        self.wait()
        where = {} if map_location is None else {"map_location": map_location}
        return self.checkpoint_io.load_checkpoint(path, weights_only=weights_only, **where)

    def remove_checkpoint(self, path: _Path) -> None:
        self.run_in_background(functools.partial(self.checkpoint_io.remove_checkpoint, path), path, removal=True)

    def link_checkpoint(self, target: _Path, link: _Path) -> None:
        # after the save of ``target`` (queued before): the link never names a file still being written
        self._submit(functools.partial(super().link_checkpoint, target, link), link, "link")

    def teardown(self) -> None:
        try:
            self.wait()
        finally:
            self._save_failed = False
            self._host = _HostCopy()  # the run is over: its buffers go back to the system
            self.checkpoint_io.teardown()
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None

    def __del__(self) -> None:
        pending = getattr(self, "_pending", None)
        if pending is not None and not pending.done():
            rank_zero_warn("AsyncCheckpointIO was dropped with saves still running; call teardown() to wait.")


class _HostCopy:
    """Copies of checkpoints in host memory, made into buffers kept from one copy to the next.

    Allocating the host memory of a large checkpoint anew at every save costs far more than copying into it
    (the allocation, then a page fault at the first touch of every page); reused buffers leave the copy alone.
    """

    def __init__(self) -> None:
        self._buffers: dict[_BufferKey, list[torch.Tensor]] = {}
        self._events: list[Any] = []  # CUDA events marking the end of the copies of the last snapshot

    def take_events(self) -> list[Any]:
        events, self._events = self._events, []
        return events

    def copy(self, checkpoint: Any) -> Any:
        tensors = _find_tensors(checkpoint)
        wanted: dict[_BufferKey, int] = {}
        for tensor in tensors:
            if _bufferable(tensor):
                key = _key(tensor)
                wanted[key] = wanted.get(key, 0) + 1
        # buffers of shapes this checkpoint does not have are dropped before new ones are made: one copy at a time
        pool = {key: self._buffers[key][: wanted[key]] for key in wanted if key in self._buffers}
        self._buffers = {}
        used: dict[_BufferKey, list[torch.Tensor]] = {}
        memo: dict[int, Any] = {}
        cuda_devices: set[torch.device] = set()
        with torch.no_grad():
            for tensor in tensors:
                memo[id(tensor)] = self._copy_tensor(tensor, pool, used, cuda_devices)
            # containers and every other value: copied too, so that the trainer may change its dicts after the
            # save returned; the memo hands out the tensor copies made above (shared tensors stay shared)
            snapshot = copy.deepcopy(checkpoint, memo)
        self._buffers = used
        for device in cuda_devices:
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(device))
            self._events.append(event)
        return snapshot

    @staticmethod
    def _copy_tensor(
        tensor: torch.Tensor, pool: dict[_BufferKey, list[torch.Tensor]], used: dict[_BufferKey, list[torch.Tensor]],
        cuda_devices: set[torch.device],
    ) -> torch.Tensor:  # fmt: skip
        source = tensor.detach()
        if not _bufferable(tensor):  # sparse, quantized, a tensor subclass: a fresh copy, as torch makes it
            return source.to("cpu", copy=True)
        key = _key(tensor)
        free = pool.get(key)
        pinned = key[2]
        buffer = free.pop() if free else torch.empty(key[0], dtype=key[1], pin_memory=pinned)
        # into pinned memory the copy from the GPU is queued on the tensor's stream (later training kernels on
        # that stream come after it); the background thread waits for it before writing
        buffer.copy_(source, non_blocking=pinned)
        if pinned:
            cuda_devices.add(source.device)
        used.setdefault(key, []).append(buffer)
        return buffer


def _find_tensors(data: Any) -> list[torch.Tensor]:
    """The tensors in ``data``'s dicts, lists, tuples and dataclasses, each once (any other object holding a
    tensor gets a plain deep copy of it: correct, only not into a kept buffer)."""
    found: dict[int, torch.Tensor] = {}
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            found.setdefault(id(item), item)
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set):
            stack.extend(item)
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, field.name) for field in dataclasses.fields(item))
    return list(found.values())


def _bufferable(tensor: torch.Tensor) -> bool:
    return type(tensor) in (torch.Tensor, torch.nn.Parameter) and tensor.layout == torch.strided and not tensor.is_quantized


def _key(tensor: torch.Tensor) -> _BufferKey:
    pinned = tensor.is_cuda and torch.cuda.is_available()
    return tuple(tensor.shape), tensor.dtype, pinned


__all__ = ["AsyncCheckpointIO"]

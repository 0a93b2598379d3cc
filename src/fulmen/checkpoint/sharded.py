"""Sharded checkpoints: a directory written by ``torch.distributed.checkpoint`` (DCP), made atomic.

A sharded checkpoint keeps the name a file checkpoint would have (``epoch=3-step=120.ckpt``), as a directory::

    epoch=3-step=120.ckpt/
        __0_0.distcp, __1_0.distcp, ...   each rank's shards of {"model": ..., "optimizer_0": ..., ...}
        .metadata                         DCP's index of every shard, written last (by the coordinating rank)
        meta.pt                           everything else: loops, callbacks, hyperparameters (rank 0, torch.save)

Atomic: the ranks write into a hidden sibling ``.NAME.partial``; once DCP has finished (its own collective:
``.metadata`` is written after every rank's shards) rank 0 adds ``meta.pt`` and renames the directory into
place. A directory under a checkpoint's name is therefore always complete, and a SIGKILL during the save leaves
the previous checkpoint untouched. Replacing a directory takes two renames (the old one aside to
``.NAME.replaced``, the new one in); a kill between them is repaired by :func:`recover` the next time the name
is read or written.

Reading never runs code: the non-tensor entries (optimizer parameter groups ...) are unpickled with
``weights_only=True``, as file checkpoints are (:mod:`fulmen.checkpoint.files`).
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import os
import pickle
import shutil
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from fulmen.checkpoint import files as checkpoint_io

META_FILE = "meta.pt"
DCP_METADATA = ".metadata"
MODEL_KEY = "model"
_PARTIAL, _REPLACED = ".partial", ".replaced"


def optimizer_key(index: int) -> str:
    return f"optimizer_{index}"


def is_sharded_checkpoint(path: Any) -> bool:
    """Whether ``path`` is a sharded checkpoint directory (complete: DCP's index is there); ``False`` for
    anything else (a file, a URL, an open file object)."""
    if not isinstance(path, str | os.PathLike):
        return False
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, DCP_METADATA))


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(f".{path.name}{suffix}")


def recover(path: str | os.PathLike[str]) -> None:
    """Undo a replacement that a kill cut between its two renames: the previous checkpoint comes back under
    its name. Any rank may call it before a name is read or written."""
    final = Path(path)
    replaced = _sibling(final, _REPLACED)
    if not final.exists() and is_sharded_checkpoint(replaced):
        with contextlib.suppress(FileNotFoundError):  # another rank repaired it first
            os.rename(replaced, final)


def recover_all(directory: str | os.PathLike[str]) -> None:
    """:func:`recover` every checkpoint of ``directory`` that a kill left aside (before listing it)."""
    if not os.path.isdir(directory):
        return
    for name in os.listdir(directory):
        if name.startswith(".") and name.endswith(_REPLACED):
            recover(Path(directory) / name[1 : -len(_REPLACED)])


def save_sharded(
    state: dict[str, Any], meta: dict[str, Any] | None, path: str | os.PathLike[str], is_coordinator: bool,
    barrier: Callable[[], None],
) -> None:  # fmt: skip
    """Write ``state`` (DTensors and tensors: every rank its shards) and ``meta`` (rank 0's plain data) as the
    sharded checkpoint ``path``; every rank calls this. See the module docstring for why it is atomic."""
    import torch.distributed.checkpoint as dcp

    partial = _begin(path, is_coordinator, barrier)
    dcp.save(state, checkpoint_id=partial)  # collective: returns on every rank once .metadata is written
    if is_coordinator:
        _complete(partial, Path(path), meta)
    barrier()


def save_sharded_async(
    state: dict[str, Any], meta: dict[str, Any] | None, path: str | os.PathLike[str], is_coordinator: bool,
    barrier: Callable[[], None], process_group: Any = None, stager: Any = None,
) -> Callable[[], None]:  # fmt: skip
    """:func:`save_sharded` with the writing in the background: ``state`` is copied to host memory (by
    ``stager``, a DCP ``AsyncStager``, when given: it keeps its buffers from one save to the next) before this
    returns, then DCP writes it on a thread of its own, with its collectives on ``process_group`` (not the one
    training uses: two threads must not interleave collectives on one group). Every rank calls this and then
    the function it returns, on any thread: that one waits until every rank's shards and DCP's ``.metadata``
    are written, then the coordinator adds ``meta`` and renames the directory into place, as
    :func:`save_sharded` does. Until then the previous checkpoint under that name stays as it was."""
    import torch.distributed.checkpoint as dcp

    partial = _begin(path, is_coordinator, barrier)
    options: dict[str, Any] = {"process_group": process_group}
    if stager is not None:
        options["async_stager"] = stager
    response = dcp.async_save(state, checkpoint_id=partial, **options)
    # newer torch answers with both futures (staging, writing) when staging itself runs in the background
    upload: Any = getattr(response, "upload_completion", response)

    def complete() -> None:
        upload.result()  # DCP's last step, on every rank, comes after the coordinator wrote .metadata
        if is_coordinator:
            _complete(partial, Path(path), meta)

    return complete


def new_stager(pinned: bool) -> Any:
    """A DCP stager for :func:`save_sharded_async`: it copies the shards into host memory (pinned, for CUDA
    tensors, and copied without blocking) before the save returns. ``None`` on a torch without one (< 2.9):
    DCP then stages into new memory at every save."""
    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    except ImportError:
        return None
    return DefaultStager(
        StagingOptions(use_pinned_memory=pinned, use_shared_memory=False, use_async_staging=False,
                       use_non_blocking_copy=pinned)
    )  # fmt: skip


@functools.cache
def stagers_are_reusable() -> bool:
    """Whether a stager of the installed torch can stage more than once, keeping its buffers for the next
    save. Some torch releases (2.11 for one) close a stager's copier after each staging: its next staging then
    fails on the first class it meets (a DTensor's layout holds several), so those need a new stager per save.
    Tried once per process, on a one-element tensor."""
    stager = new_stager(pinned=False)
    if stager is None:
        return False
    try:
        for _ in range(2):
            stager.stage({"tensor": torch.zeros(1), "class": int})
    except KeyError:
        return False
    finally:
        stager.close()
    return True


def _begin(path: str | os.PathLike[str], is_coordinator: bool, barrier: Callable[[], None]) -> Path:
    """Make way for a new sharded save of ``path``: a replacement a kill interrupted is undone, the leftover of
    a killed save removed. Returns the hidden directory the ranks write into."""
    final = Path(path)
    partial = _sibling(final, _PARTIAL)
    if is_coordinator:
        recover(final)
        if partial.exists():  # left by a run killed while saving
            shutil.rmtree(partial)
        final.parent.mkdir(parents=True, exist_ok=True)
    barrier()
    return partial


def _complete(partial: Path, final: Path, meta: dict[str, Any] | None) -> None:
    """The coordinator's end of a sharded save, once every rank's shards are in ``partial``: add ``meta``, then
    put the directory under its final name (the previous checkpoint aside first, removed last)."""
    checkpoint_io.save(meta or {}, partial / META_FILE)
    replaced = _sibling(final, _REPLACED)
    if replaced.exists():
        shutil.rmtree(replaced)
    if final.is_dir():
        os.rename(final, replaced)
    elif final.exists():  # a file checkpoint of the same name (an earlier state_dict_type="full" run)
        os.replace(final, replaced)
    os.rename(partial, final)
    checkpoint_io.fsync_directory(final.parent)
    if replaced.is_dir():
        shutil.rmtree(replaced)
    elif replaced.exists():
        os.remove(replaced)


def remove(path: str | os.PathLike[str]) -> None:
    """Delete a checkpoint, directory or file (a missing one is not an error)."""
    if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.exists(path):
        os.remove(path)


def read_meta(path: str | os.PathLike[str], weights_only: bool | None = True) -> dict[str, Any]:
    """The training state beside the shards (hyperparameters included), read as a file checkpoint is:
    ``weights_only`` as :func:`checkpoint_io.load` takes it."""
    meta_path = Path(path) / META_FILE
    if not meta_path.is_file():
        raise checkpoint_io.CorruptCheckpointError(
            f"{os.fspath(path)!r} is a torch.distributed.checkpoint directory without fulmen's {META_FILE}: it "
            "holds tensors but not the training state. Load its tensors with torch.distributed.checkpoint."
        )
    return checkpoint_io.load(meta_path, map_location="cpu", weights_only=weights_only)


def _safe_planner(flatten: bool = True) -> Any:
    from torch.distributed.checkpoint import DefaultLoadPlanner

    class SafeLoadPlanner(DefaultLoadPlanner):
        """DCP's planner, except that non-tensor entries are unpickled with ``weights_only=True``."""

        def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
            plain = torch.load(value, weights_only=True)  # refuses anything but tensors, containers, primitives
            buffer = io.BytesIO()
            torch.save(plain, buffer)  # DCP's own setter unpickles it again: now it only holds plain data
            buffer.seek(0)
            super().load_bytes(read_item, buffer)

    # without flattening the planner must not copy the dict either: pickled entries are set into the dict it holds
    return SafeLoadPlanner(flatten_state_dict=flatten, flatten_sharded_tensors=flatten)


def load_sharded(state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Fill ``state`` (this rank's DTensors and tensors, any number of ranks) in place from ``path``: DCP
    reads each rank's share whatever the number of ranks that wrote it (resharding)."""
    import torch.distributed.checkpoint as dcp

    with _unwrapped_unsafe(path):
        dcp.load(state, checkpoint_id=os.fspath(path), planner=_safe_planner())


@contextlib.contextmanager
def _unwrapped_unsafe(path: str | os.PathLike[str]) -> Iterator[None]:
    """DCP reports a reader's error wrapped per rank; a refused pickle is raised as what it is."""
    from torch.distributed.checkpoint import CheckpointException

    try:
        yield
    except CheckpointException as error:
        for failure in error.failures.values():
            cause = failure[0] if isinstance(failure, tuple) else failure  # (exception, traceback)
            if isinstance(cause, pickle.UnpicklingError):
                raise checkpoint_io.UnsafeCheckpointError(
                    f"{os.fspath(path)!r} holds a pickled object that only a code-running unpickle could build "
                    f"({cause}). fulmen reads checkpoints without running code; if you trust this file, load its "
                    "entries yourself with torch.distributed.checkpoint."
                ) from None
        raise


def read_full(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Every tensor of a sharded checkpoint, whole, in this process (no process group): the nested dict that
    was saved, e.g. ``{"model": {...}, "optimizer_0": {...}}``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    reader = dcp.FileSystemReader(os.fspath(path))
    metadata = reader.read_metadata()
    flat: dict[str, Any] = {}
    for key, item in metadata.state_dict_metadata.items():
        if isinstance(item, TensorStorageMetadata):
            flat[key] = torch.empty(item.size, dtype=item.properties.dtype)
        else:
            flat[key] = None  # a pickled entry: the planner reads it
    with warnings.catch_warnings():  # DCP says it assumes a single process: that is the point here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        with _unwrapped_unsafe(path):
            dcp.load(flat, storage_reader=reader, planner=_safe_planner(flatten=False), no_dist=True)
    paths = metadata.planner_data if isinstance(metadata.planner_data, dict) else {}
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        _set_path(nested, tuple(paths.get(key, (key,))), value)
    return nested


def _set_path(root: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    """``root[path[0]][path[1]]... = value``, making dicts (for str keys) and lists (for int keys) on the way."""
    node: Any = root
    for key, following in itertools.pairwise(path):
        empty: Any = [] if isinstance(following, int) else {}
        if isinstance(node, list):
            while len(node) <= key:
                node.append(None)
            if node[key] is None:
                node[key] = empty
        else:
            node.setdefault(key, empty)
        node = node[key]
    last = path[-1]
    if isinstance(node, list):
        while len(node) <= last:
            node.append(None)
    node[last] = value


# -- optimizer states: by parameter name (torch.distributed) <-> by position (torch.optim, file checkpoints) --
def optimizer_state_by_position(named: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state keyed by parameter names (what torch.distributed's ``get_optimizer_state_dict``
    gives) as ``torch.optim.Optimizer.state_dict()`` keys it: parameters numbered in the order the parameter
    groups list them. The file is then the one a single process writes, and loads anywhere."""
    position: dict[str, int] = {}
    groups = []
    for group in named.get("param_groups", []):
        ids = []
        for name in group["params"]:
            ids.append(position.setdefault(name, len(position)))
        groups.append({**group, "params": ids})
    state = {position[name]: value for name, value in named.get("state", {}).items() if name in position}
    return {"state": state, "param_groups": groups}


def optimizer_state_by_name(positional: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse: ``names[i]`` is the name of the optimizer's i-th parameter (in its groups' order)."""
    groups = []
    for group in positional.get("param_groups", []):
        groups.append({**group, "params": [names[i] for i in group["params"]]})
    state = {names[int(i)]: value for i, value in positional.get("state", {}).items()}
    return {"state": state, "param_groups": groups}


def consolidate(
    path: str | os.PathLike[str], output: str | os.PathLike[str], weights_only: bool | None = True
) -> dict[str, Any]:
    """Turn the sharded checkpoint ``path`` into one ordinary checkpoint file ``output`` (written atomically),
    loadable on one process by ``load_from_checkpoint``, ``Trainer.fit(ckpt_path=...)`` and Lightning.
    Returns the checkpoint written. ``weights_only=False`` reads a trusted directory whose hyperparameters hold
    objects (modules, functions ...)."""
    checkpoint = load_consolidated(path, weights_only=weights_only)
    checkpoint_io.save(checkpoint, output)
    return checkpoint


def load_consolidated(path: str | os.PathLike[str], weights_only: bool | None = True) -> dict[str, Any]:
    """The sharded checkpoint ``path`` as the dict a file checkpoint holds (whole tensors, optimizer states
    keyed by position), read in this process alone; ``weights_only`` applies to its training state
    (:func:`read_meta`)."""
    if not is_sharded_checkpoint(path):
        raise FileNotFoundError(
            f"{os.fspath(path)!r} is not a sharded checkpoint (a directory with torch.distributed.checkpoint's "
            f"{DCP_METADATA}). A file checkpoint needs no consolidation."
        )
    checkpoint = dict(read_meta(path, weights_only=weights_only))
    tensors = read_full(path)
    checkpoint["state_dict"] = tensors.get(MODEL_KEY, {})
    count = int(checkpoint.pop("sharded_optimizers", 0))
    if count:
        checkpoint["optimizer_states"] = [optimizer_state_by_position(tensors[optimizer_key(i)]) for i in range(count)]
    return checkpoint

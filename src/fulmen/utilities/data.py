"""Helpers for dataloaders: lengths, batch sizes, limits, sampler epochs (``lightning.pytorch.utilities.data``).
Making a loader again with other arguments is :mod:`fulmen.utilities.loader_rebuild`; data sets held in memory
are :mod:`fulmen.utilities.in_memory`."""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from fulmen.utilities.apply_func import is_dataclass_instance as is_dataclass_instance
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import WarningCache, rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning as PossibleUserWarning

if TYPE_CHECKING:
    from fulmen.strategies.strategy import Strategy

_warnings = WarningCache()
warning_cache = _warnings  # Lightning's name of this module's cache


def has_len(dataloader: object) -> bool:
    """True if ``len(dataloader)`` works and is finite. A zero length counts as having a length."""
    try:
        n = len(dataloader)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return False
    return n is not None


def sized_len(dataloader: object) -> int | None:
    """``len(dataloader)``, or None when it has no length."""
    return len(dataloader) if has_len(dataloader) else None  # type: ignore[arg-type]


def has_iterable_dataset(dataloader: object) -> bool:
    """Whether ``dataloader`` reads an ``IterableDataset`` (whose length, if any, the data set only estimates)."""
    return isinstance(getattr(dataloader, "dataset", None), IterableDataset)


is_iterable_dataset = has_iterable_dataset  # fulmen's earlier name


def has_len_all_ranks(
    dataloader: object, strategy: Strategy, allow_zero_length_dataloader_with_multiple_devices: bool = False
) -> bool:
    """Whether ``dataloader`` has a length, checking with the other processes (through ``strategy``) that the
    data is not empty everywhere. A process without batches while others have some raises ``RuntimeError``
    (it would leave the others waiting in a collective), unless
    ``allow_zero_length_dataloader_with_multiple_devices=True``, which warns instead."""
    local_length = sized_len(dataloader)
    if local_length is None:
        return False
    name = type(dataloader).__name__
    total_length = strategy.reduce(torch.tensor(local_length, device=strategy.root_device), reduce_op="sum")
    if total_length == 0:
        rank_zero_warn(
            f"Total length of `{name}` across ranks is zero. Please make sure this was your intention."
        )
    if total_length > 0 and local_length == 0:
        if not allow_zero_length_dataloader_with_multiple_devices:
            raise RuntimeError(
                f"`{name}` within local rank has zero length. Please make sure that it returns at least 1 batch "
                "(or pass allow_zero_length_dataloader_with_multiple_devices=True to allow it)."
            )
        rank_zero_warn(
            f"Total length of `{name}` across ranks is zero, but local rank has zero length. Please be cautious "
            "of uneven batch length."
        )
    if has_iterable_dataset(dataloader):
        rank_zero_warn(
            "Your `IterableDataset` has `__len__` defined. In combination with multi-process data loading (when "
            "num_workers > 1), `__len__` could be inaccurate if each worker is not configured independently to "
            "avoid having duplicate data."
        )
    return True


def suggested_max_num_workers(local_world_size: int) -> int:
    """An upper bound for ``DataLoader(num_workers=...)``: the CPU cores this process may use, shared among the
    ``local_world_size`` processes on this machine, less one each for the main process (at least 1)."""
    if local_world_size < 1:
        raise ValueError(
            f"`local_world_size` should be >= 1, got {local_world_size}: pass the number of processes (devices) "
            "on this machine."
        )
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // local_world_size - 1)


def extract_batch_size(batch: Any) -> int:
    """The batch size of ``batch``: the size of the first dimension of the first tensor found (1 for a scalar),
    looking through mappings, iterables and dataclasses. Tensors of different sizes warn (once) that the size is
    ambiguous; no tensor at all raises ``MisconfigurationException``."""
    message = (
        "We could not infer the batch_size from the batch. Either simplify its structure or provide the "
        "batch_size as `self.log(..., batch_size=batch_size)`."
    )
    batch_size = None
    try:
        for size in _batch_sizes(batch):
            if batch_size is None:
                batch_size = size
            elif size != batch_size:
                warning_cache.warn(  # the module's name, read now: patching or clearing it reaches this
                    "Trying to infer the `batch_size` from an ambiguous collection. The batch size we found is "
                    f"{batch_size}. To avoid any miscalculations, use `self.log(..., batch_size=batch_size)`."
                )
                break
    except RecursionError:
        raise RecursionError(message) from None
    if batch_size is None:
        raise MisconfigurationException(message)
    return batch_size


def _batch_sizes(batch: Any) -> Iterator[int | None]:
    """The first-dimension size of every tensor in ``batch``, in order; None for each leaf that is no tensor."""
    if isinstance(batch, torch.Tensor):
        yield 1 if batch.ndim == 0 else batch.size(0)
    elif isinstance(batch, (Iterable, Mapping)) and not isinstance(batch, str):
        for item in batch.values() if isinstance(batch, Mapping) else batch:
            yield from _batch_sizes(item)
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        for f in dataclasses.fields(batch):
            yield from _batch_sizes(getattr(batch, f.name))
    else:
        yield None


def parse_num_batches(stage: str, length: int | float, limit: int | float) -> int | float:
    """How many batches of a dataloader of ``length`` a stage uses given ``limit_{stage}_batches``.

    ``length`` may be ``inf`` (no ``__len__``). An int limit caps the count; a float is a fraction.
    """
    if isinstance(limit, int):
        return min(length, limit)
    if length == float("inf"):
        if limit == 1.0:
            return float("inf")
        raise MisconfigurationException(
            f"limit_{stage}_batches={limit!r} is a fraction, but the {stage} dataloader has no length "
            f"(an IterableDataset), so a fraction of it is undefined. Use an int number of batches instead."
        )
    n = int(length * limit)
    if n == 0 and limit > 0.0 and length > 0:
        min_fraction = 1.0 / length
        raise MisconfigurationException(
            f"limit_{stage}_batches={limit!r} of a {stage} dataloader with {int(length)} batches selects "
            f"{length} * {limit} < 1 batch. Use limit_{stage}_batches >= {min_fraction:.4g}, or an int."
        )
    return n


class BatchIndexRecorder:
    """A batch sampler that passes its batches through and notes their sample indices, in order.

    The DataLoader (its workers included) draws index lists from it ahead of use; batches come back in the
    same order, so the oldest noted list belongs to the next batch the loop takes: ``pop()`` per batch."""

    def __init__(self, batch_sampler: Iterable[list[int]]) -> None:
        self.batch_sampler = batch_sampler
        self._pending: deque[list[int]] = deque()

    def __iter__(self) -> Iterator[list[int]]:
        self._pending.clear()
        for indices in self.batch_sampler:
            self._pending.append([int(i) for i in indices])
            yield indices

    def __len__(self) -> int:
        return len(self.batch_sampler)  # type: ignore[arg-type]

    def pop(self) -> list[int]:
        return self._pending.popleft() if self._pending else []


def record_batch_indices(loader: Any) -> tuple[Any, BatchIndexRecorder | None]:
    """``loader`` rebuilt to note each batch's sample indices; unchanged (and None) when it has no batch
    sampler to watch (an iterable dataset, a custom loader)."""
    if type(loader) is not DataLoader or loader.batch_sampler is None or is_iterable_dataset(loader):
        return loader, None
    recorder = BatchIndexRecorder(loader.batch_sampler)
    workers = loader.num_workers
    rebuilt = DataLoader(
        loader.dataset, batch_sampler=recorder, num_workers=workers, collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory, timeout=loader.timeout, worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context, generator=loader.generator,
        prefetch_factor=loader.prefetch_factor if workers > 0 else None,
        persistent_workers=loader.persistent_workers if workers > 0 else False,
    )  # fmt: skip
    return rebuilt, recorder


def set_sampler_epoch(loader: Any, epoch: int) -> None:
    """Tell the samplers of ``loader`` (each loader of a ``CombinedLoader``) which epoch starts: a
    ``DistributedSampler`` or any sampler with ``set_epoch`` draws that epoch's order from it. Called before the
    epoch's iterator is made, for training and evaluation loaders alike, so an order that depends on the epoch is
    the same under every framework that runs the same program."""
    loaders = getattr(loader, "flattened", None)
    for dl in loaders if isinstance(loaders, list) else [loader]:
        sampler: Any = getattr(dl, "sampler", None)
        inner: Any = getattr(getattr(dl, "batch_sampler", None), "sampler", None)
        for smp in (sampler,) if inner is sampler else (sampler, inner):
            set_epoch = getattr(smp, "set_epoch", None)
            if callable(set_epoch):
                set_epoch(epoch)


def is_stateful(obj: Any) -> bool:
    """Whether ``obj`` keeps a state a checkpoint can hold: an instance with ``state_dict()`` and
    ``load_state_dict()`` (a stateful loader, sampler or dataset)."""
    return (
        obj is not None
        and not isinstance(obj, type)
        and callable(getattr(obj, "state_dict", None))
        and callable(getattr(obj, "load_state_dict", None))
    )


# names Lightning's module holds, which libraries import from here; this module's code does not use them
# and fulmen's loader helpers that lived here before they got modules of their own
__getattr__ = _lazy_aliases(__name__, {
    "RunningStage": "fulmen.runtime.state.RunningStage",
    "EpochShuffle": "fulmen.utilities.in_memory.EpochShuffle",
    "InMemoryDataLoader": "fulmen.utilities.in_memory.InMemoryDataLoader",
    "preload": "fulmen.utilities.in_memory.preload",
    "batch_sampler_over": "fulmen.utilities.loader_rebuild.batch_sampler_over",
    "rebuild_dataloader": "fulmen.utilities.loader_rebuild.rebuild_dataloader",
    "recording_loader_arguments": "fulmen.utilities.loader_rebuild.recording_loader_arguments",
    "with_batch_sampler": "fulmen.utilities.loader_rebuild.with_batch_sampler",
})  # fmt: skip

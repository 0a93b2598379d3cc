"""Helpers for dataloaders: lengths, batch sizes, limits; data sets held in memory."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, RandomSampler, TensorDataset

from fulmen.utilities.apply_func import is_dataclass_instance as is_dataclass_instance
from fulmen.utilities.exceptions import InvalidTypeError, MisconfigurationException
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


# -- data sets that fit in memory ------------------------------------------------------------------------
def rebuild_dataloader(loader: Any, **changes: Any) -> Any:
    """A new DataLoader of ``loader``'s class with the same arguments as ``loader`` except ``changes``
    (``batch_size``, ``sampler``, ...): how fulmen changes a loader the user built (a loader's batch size
    cannot be changed once it exists). A subclass of ``DataLoader`` is made again through its own ``__init__``,
    its other arguments read from the attributes of the same names."""
    batches_by_size = loader.batch_sampler is not None and loader.batch_size is not None
    unbatched = loader.batch_sampler is None and "batch_size" not in changes  # batch_size=None: one sample each
    by_batch_sampler = "batch_sampler" in changes  # the new batch sampler makes the batches
    if not isinstance(loader, DataLoader) or not (batches_by_size or unbatched or by_batch_sampler):
        raise MisconfigurationException(
            f"A {type(loader).__name__} with {type(getattr(loader, 'batch_sampler', None)).__name__} cannot be "
            "rebuilt with other arguments: only a torch DataLoader built with batch_size= can. Let the module "
            "or data module build it (train_dataloader() reading self.batch_size), or build it yourself."
        )
    workers = loader.num_workers
    arguments: dict[str, Any] = {
        "batch_size": loader.batch_size, "num_workers": workers, "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory, "drop_last": loader.drop_last, "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn, "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator, "prefetch_factor": loader.prefetch_factor if workers > 0 else None,
        "persistent_workers": loader.persistent_workers if workers > 0 else False,
    }  # fmt: skip
    if by_batch_sampler:  # the arguments a DataLoader takes beside a batch sampler
        arguments.update(batch_size=1, drop_last=False)
    elif "sampler" not in changes:  # keep the order: shuffled stays shuffled, a custom sampler stays
        if isinstance(loader.sampler, RandomSampler) and loader.sampler.generator is loader.generator:
            arguments["shuffle"] = True
        elif not is_iterable_dataset(loader):
            arguments["sampler"] = loader.sampler
    arguments.update(changes)
    if type(loader) is DataLoader:
        return DataLoader(loader.dataset, **arguments)
    return _made_again(loader, arguments)


_RECORDED = "_fulmen_init_arguments"  # where a loader made while recording keeps its __init__ arguments


@contextlib.contextmanager
def recording_loader_arguments() -> Iterator[None]:
    """While held, each ``DataLoader`` and ``BatchSampler`` made (of any subclass defined by then) remembers the
    arguments its ``__init__`` was called with, so that fulmen can make it again with another sampler even when
    its class does not keep them as attributes. Held while a module's or data module's ``*_dataloader`` hook
    runs."""
    classes: list[Any] = []
    todo: list[Any] = [DataLoader, BatchSampler]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if "__init__" in vars(cls):
            classes.append(cls)
    originals = {cls: vars(cls)["__init__"] for cls in classes}

    def recording(original: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(original)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            if _RECORDED not in self.__dict__:  # the outermost __init__: the loader's own class
                self.__dict__[_RECORDED] = (args, kwargs)
            original(self, *args, **kwargs)

        return __init__

    for cls, original in originals.items():
        cls.__init__ = recording(original)
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.__init__ = original


def _recorded_arguments(loader: Any) -> dict[str, Any]:
    """The arguments ``loader``'s (a DataLoader's or batch sampler's) ``__init__`` was called with (by name; what
    went to ``**kwargs`` flattened), when it was made while recording (:func:`recording_loader_arguments`)."""
    recorded = loader.__dict__.get(_RECORDED)
    if recorded is None:
        return {}
    args, kwargs = recorded
    try:
        bound = inspect.signature(type(loader).__init__).bind(loader, *args, **kwargs)
    except TypeError:
        return {}
    found: dict[str, Any] = {}
    for name, value in list(bound.arguments.items())[1:]:
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            found.update(value)
        elif kind is not inspect.Parameter.VAR_POSITIONAL:
            found[name] = value
    return found


def _made_again(loader: DataLoader, arguments: dict[str, Any]) -> DataLoader:
    """``type(loader)(...)``: the DataLoader arguments its ``__init__`` takes from ``arguments``, its own from
    the arguments it was made with (when made in a ``*_dataloader`` hook), else from ``loader``'s attributes of
    the same names (a subclass that keeps them, as most do)."""
    cls = type(loader)
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    named = {p.name: p for p in parameters
             if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}  # fmt: skip
    given = _recorded_arguments(loader)
    attributes = {k: v for k, v in vars(loader).items() if not k.startswith("_")}
    call: dict[str, Any] = {}
    missing = []
    for name, parameter in named.items():
        if name == "dataset":  # as given (a subclass may have wrapped it before handing it on)
            call[name] = given.get(name, loader.dataset)
        elif name in arguments:
            call[name] = arguments[name]
        elif name in _ORDER_ARGUMENTS:  # the order is the new one (`arguments`), never the old loader's
            if parameter.default is inspect.Parameter.empty:
                missing.append(name)
        elif name in given:
            call[name] = given[name]
        elif name in attributes:
            call[name] = attributes[name]
        elif parameter.default is inspect.Parameter.empty:
            missing.append(name)
    refused = [] if takes_any else sorted(k for k in ("sampler", "batch_size") if k in arguments and k not in named)
    if missing or refused:
        problem = (
            f"its __init__ requires {', '.join(map(repr, missing))}, which it does not keep as attributes of the "
            "same names" if missing else f"its __init__ takes no {', '.join(map(repr, refused))}"
        )  # fmt: skip
        raise MisconfigurationException(
            f"fulmen must make the {cls.__name__} again with another sampler or batch size, but {problem}. Make it "
            f"in a `*_dataloader` hook of the module or data module (its arguments are then recorded), or store "
            f"each __init__ argument as an attribute of the same name (self.{(missing or refused)[0]} = ...), or "
            "set Trainer(use_distributed_sampler=False) and give it a DistributedSampler yourself."
        )
    if takes_any:  # what went to **kwargs: the DataLoader's arguments, and the subclass's own passed on
        call.update({k: v for k, v in given.items() if k not in named and k not in _LOADER_ARGUMENTS})
        call.update({k: v for k, v in arguments.items() if k not in named})
    if call.get("sampler") is not None:
        call.pop("shuffle", None)  # a sampler given: `shuffle` must not be
    return cls(**call)


def batch_sampler_over(batch_sampler: Any, sampler: Any, predicting: bool = False) -> Any:
    """``batch_sampler``'s class made again over ``sampler`` (a process's share of the indices), with its batch size
    and ``drop_last`` (``False`` when predicting: every sample is predicted): from the arguments it was made with
    (in a ``*_dataloader`` hook), else as a ``BatchSampler`` takes them. A batch sampler that takes no sampler is
    refused (``TypeError``), except for prediction, where it is kept as it is (with a warning)."""
    cls = type(batch_sampler)
    given = _recorded_arguments(batch_sampler)
    how = (
        "Give it BatchSampler's arguments (sampler, batch_size, drop_last), or set Trainer(use_distributed_sampler="
        "False) and share the indices out among the processes in your batch sampler yourself."
    )
    if given:
        if "sampler" not in given:
            raise InvalidTypeError(
                f"fulmen must make the batch sampler {cls.__qualname__} again over each process's share of the "
                f"data, but its __init__ takes no `sampler` argument. {how}"
            )
        given["sampler"] = sampler
        if predicting and "drop_last" in given:
            given["drop_last"] = False
        return cls(**given)
    if hasattr(batch_sampler, "batch_size") and hasattr(batch_sampler, "drop_last"):
        drop_last = False if predicting else batch_sampler.drop_last
        try:
            return cls(sampler, batch_size=batch_sampler.batch_size, drop_last=drop_last)
        except TypeError as err:
            raise InvalidTypeError(
                f"fulmen must make the batch sampler {cls.__qualname__} again over each process's share of the data "
                f"as `{cls.__qualname__}(sampler, batch_size=..., drop_last=...)`, which failed ({err}). Make it in a "
                f"`*_dataloader` hook of the module or data module (its arguments are then recorded). {how}"
            ) from err
    if predicting:
        rank_zero_warn(
            f"The batch sampler {cls.__qualname__} of the predict dataloader is not a BatchSampler: it is kept as it "
            "is, so each process predicts the batches it gives (and `drop_last` cannot be turned off). Make sure "
            "it yields every index once over the processes.",
            category=PossibleUserWarning,
        )
        return batch_sampler
    raise InvalidTypeError(
        f"fulmen cannot share the batches of {cls.__qualname__} out among the processes: it is not a BatchSampler "
        f"(it has no `batch_size` and `drop_last`). {how}"
    )


_ORDER_ARGUMENTS = frozenset({"batch_sampler", "sampler", "shuffle"})
_LOADER_ARGUMENTS = frozenset(inspect.signature(DataLoader.__init__).parameters) - {"self"}


def with_batch_sampler(loader: DataLoader, batch_sampler: Any, dataset: Any = None, persistent: bool | None = None) -> DataLoader:
    """A DataLoader that loads like ``loader`` (workers, collation, pinning, generator) over ``batch_sampler``
    (and ``dataset`` when given): how fulmen starts an epoch at a later batch or seeds each sample."""
    workers = loader.num_workers
    kwargs: dict[str, Any] = {
        "batch_sampler": batch_sampler, "num_workers": workers, "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory, "timeout": loader.timeout, "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context, "generator": loader.generator,
        "prefetch_factor": loader.prefetch_factor if workers > 0 else None,
        "persistent_workers": loader.persistent_workers if persistent is None else persistent,
        "pin_memory_device": loader.pin_memory_device,
    }  # fmt: skip
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    return DataLoader(loader.dataset if dataset is None else dataset, **kwargs)


def preload(dataset: Any, device: torch.device | str | None = None, chunk_size: int = 1024) -> TensorDataset:
    """Materialise a map-style ``dataset`` once, as stacked tensors in RAM (or on ``device``).

    Samples are collated in chunks the way a ``DataLoader`` collates a batch, so a sample ``(x, y)`` gives
    a ``TensorDataset`` of all ``x`` and all ``y``. Pair it with :class:`InMemoryDataLoader`, which then
    slices whole batches instead of collating samples one by one every epoch.
    """
    if isinstance(dataset, TensorDataset):
        tensors: tuple[torch.Tensor, ...] = tuple(dataset.tensors)
    else:
        if isinstance(dataset, IterableDataset) or not has_len(dataset):
            raise TypeError(
                f"preload(dataset={type(dataset).__name__}): the dataset must be map-style (with __len__ and "
                "__getitem__); an IterableDataset has no fixed set of samples to hold in memory."
            )
        chunks = list(DataLoader(dataset, batch_size=chunk_size, shuffle=False))
        if not chunks:
            raise ValueError(f"preload(dataset={type(dataset).__name__}): the dataset is empty.")
        first = chunks[0]
        if isinstance(first, torch.Tensor):
            tensors = (torch.cat(chunks),)
        elif isinstance(first, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in first):
            tensors = tuple(torch.cat([chunk[i] for chunk in chunks]) for i in range(len(first)))
        else:
            raise TypeError(
                f"preload(dataset={type(dataset).__name__}): samples collate to a {type(first).__name__}; "
                "preload supports samples that are tensors/numbers or tuples of them, e.g. (x, y)."
            )
    if device is not None:
        tensors = tuple(t.to(device) for t in tensors)
    return TensorDataset(*tensors)


class EpochShuffle:
    """The order of one epoch: a permutation drawn from a generator seeded with ``seed + epoch``.

    The fit loop calls :meth:`set_epoch` at each epoch start (as for a ``DistributedSampler``), so an
    epoch's order depends only on the seed and the epoch: a resumed run sees the same batches.
    """

    def __init__(self, size: int, shuffle: bool, seed: int) -> None:
        self.size = size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def indices(self, device: torch.device) -> torch.Tensor | None:
        """This process's sample order, or None for "all samples in order" (batches are then views)."""
        rank, world = _rank_and_world()
        if not self.shuffle and world == 1:
            return None
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=generator)
        else:
            order = torch.arange(self.size)
        if world > 1:  # as DistributedSampler: pad to a multiple of the world size, then every world-th
            per_rank = -(-self.size // world)
            order = torch.cat([order, order[: per_rank * world - self.size]])[rank::world]
        return order.to(device)


class InMemoryDataLoader:
    """Batches sliced from tensors held in memory: a fast stand-in for ``DataLoader(TensorDataset(...))``.

    A ``DataLoader`` fetches and collates every sample on its own (``batch_size`` indexing calls and a
    ``torch.stack`` per batch); this loader takes each batch with one slice (a view, without shuffling)
    or one gather per tensor. Batches are lists ``[x, y, ...]``, as ``DataLoader`` gives for a
    ``TensorDataset``. With ``shuffle=True`` the order comes from ``seed`` and the epoch (see
    :class:`EpochShuffle`); ``seed=None`` draws one from torch's global generator, so
    ``seed_everything`` makes it reproducible. Under ``torch.distributed`` each process takes its share,
    as a ``DistributedSampler`` would give it.
    """

    def __init__(
        self,
        dataset: TensorDataset | torch.Tensor | tuple[torch.Tensor, ...] | list[torch.Tensor],
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int | None = None,
    ) -> None:
        if isinstance(dataset, TensorDataset):
            tensors = tuple(dataset.tensors)
        elif isinstance(dataset, torch.Tensor):
            tensors = (dataset,)
        elif (
            isinstance(dataset, (tuple, list))
            and dataset
            and all(isinstance(t, torch.Tensor) for t in dataset)
        ):
            tensors = tuple(dataset)
        else:
            raise TypeError(
                f"InMemoryDataLoader(dataset={type(dataset).__name__}): pass a TensorDataset, a tensor or a "
                "tuple of tensors. For any other map-style dataset, load it once with "
                "fulmen.utilities.data.preload(dataset)."
            )
        sizes = {t.size(0) for t in tensors}
        if len(sizes) != 1:
            raise ValueError(f"InMemoryDataLoader: the tensors' first dimensions differ: {sorted(sizes)}.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"InMemoryDataLoader(batch_size={batch_size!r}): must be an int >= 1.")
        if seed is None:
            seed = int(torch.randint(0, 2**31 - 1, ()).item())
        self.dataset = TensorDataset(*tensors)
        self.tensors = tensors
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = EpochShuffle(sizes.pop(), shuffle, seed)

    def __len__(self) -> int:
        rank_size = -(-self.sampler.size // _rank_and_world()[1])
        return rank_size // self.batch_size if self.drop_last else -(-rank_size // self.batch_size)

    def __iter__(self) -> Iterator[list[torch.Tensor]]:
        order = self.sampler.indices(self.tensors[0].device)
        size = self.sampler.size if order is None else len(order)
        bs = self.batch_size
        for start in range(0, len(self) * bs, bs):
            stop = min(start + bs, size)
            if order is None:
                yield [t[start:stop] for t in self.tensors]
            else:
                index = order[start:stop]
                yield [t[index] for t in self.tensors]


def _rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


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
__getattr__ = _lazy_aliases(__name__, {
    "RunningStage": "fulmen.runtime.state.RunningStage",
})  # fmt: skip

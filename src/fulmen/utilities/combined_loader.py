"""Iterate several dataloaders together (a list or dict of them) as one."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from typing import Any

from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from fulmen.utilities.data import has_len, is_stateful
from fulmen.utilities.data import sized_len as sized_len
from fulmen.utilities.exceptions import MisconfigurationException

_MODES = ("max_size_cycle", "min_size", "max_size", "sequential")


class CombinedLoader:
    """Combine iterables (list or dict): each batch holds one batch of each, in the same structure.

    Modes: 'max_size_cycle' (default for training: shorter ones restart until the longest ends), 'min_size'
    (stop with the shortest), 'max_size' (exhausted ones yield None), 'sequential' (one after another).
    Iterating it yields ``(batch, batch_idx, dataloader_idx)`` in every mode.
    """

    def __init__(self, iterables: Any, mode: str = "min_size") -> None:
        if mode not in _MODES:
            raise MisconfigurationException(
                f"CombinedLoader(mode={mode!r}) is not supported. Use one of {list(_MODES)}."
            )
        self._iterables = iterables
        self.mode = mode
        self._single = not isinstance(iterables, (Mapping, list, tuple))  # one iterable, not a collection
        if isinstance(iterables, Mapping):
            self._keys: list[Any] | None = list(iterables)
            self._loaders = list(iterables.values())
        elif isinstance(iterables, (list, tuple)):
            self._keys = None
            self._loaders = list(iterables)
        else:
            self._keys = None
            self._loaders = [iterables]
        self._limits: list[int | float] | None = None
        self._iterator: Iterator[Any] | None = None

    @property
    def iterables(self) -> Any:
        """The iterables as given: one, or a list, tuple or dict of them."""
        return self._iterables

    @property
    def flattened(self) -> list[Any]:
        """The iterables as a flat list (a dict's values in its order)."""
        return self._loaders

    @flattened.setter
    def flattened(self, flattened: list[Any]) -> None:
        """Replace the iterables, one for one: ``iterables`` keeps its structure (list, tuple, dict keys)."""
        if len(flattened) != len(self._loaders):
            raise ValueError(
                f"Mismatch in flattened length ({len(flattened)}) and existing length ({len(self._loaders)})"
            )
        self._iterables = self._unflatten(list(flattened))
        self._loaders = flattened

    @property
    def limits(self) -> list[int | float] | None:
        """How many batches of each iterable count (``None``: all): ``len()`` follows them, and ``"sequential"``
        moves on to the next iterable once one's limit is read."""
        return self._limits

    @limits.setter
    def limits(self, limits: int | float | list[int | float] | None) -> None:
        if isinstance(limits, (int, float)):
            limits = [limits] * len(self._loaders)
        elif isinstance(limits, list) and len(limits) != len(self._loaders):
            raise ValueError(
                f"Mismatch in number of limits ({len(limits)}) and number of iterables ({len(self._loaders)})"
            )
        self._limits = limits

    @property
    def sampler(self) -> Any:
        """Each iterable's ``sampler`` (``None`` where it has none), in the structure of ``iterables``."""
        return self._unflatten([getattr(dl, "sampler", None) for dl in self._loaders])

    @property
    def batch_sampler(self) -> Any:
        """Each iterable's ``batch_sampler`` (``None`` where it has none), in the structure of ``iterables``."""
        return self._unflatten([getattr(dl, "batch_sampler", None) for dl in self._loaders])

    def reset(self) -> None:
        """Drop the iteration in progress and shut down the dataloaders' worker processes; the next ``iter()``
        starts every iterable from its beginning."""
        if self._iterator is not None:
            close = getattr(self._iterator, "close", None)
            if close is not None:
                close()
            self._iterator = None
        for iterable in self._loaders:
            _shutdown_workers_and_reset_iterator(iterable)

    def _unflatten(self, items: list[Any]) -> Any:
        """``items``, one per iterable, in the structure of ``iterables``."""
        return items[0] if self._single else self._pack(items)

    def _state_dicts(self) -> list[dict[str, Any]]:
        """The states of the combined iterables that keep one (what a checkpoint holds of them)."""
        return [loader.state_dict() for loader in self._loaders if is_stateful(loader)]

    def _load_state_dicts(self, states: list[dict[str, Any]]) -> None:
        """Give each iterable that keeps a state its saved one, in order."""
        if not states:
            return
        stateful = [loader for loader in self._loaders if is_stateful(loader)]
        if len(stateful) != len(states):
            raise RuntimeError(
                f"The CombinedLoader has {len(stateful)} iterables with `state_dict`/`load_state_dict`, but the "
                f"checkpoint holds {len(states)} states: combine the dataloaders the checkpoint was written with."
            )
        for loader, state in zip(stateful, states):
            loader.load_state_dict(state)

    def _pack(self, items: list[Any]) -> Any:
        if self._keys is not None:
            return dict(zip(self._keys, items))
        return type(self._iterables)(items) if isinstance(self._iterables, tuple) else items

    def __len__(self) -> int:
        lengths: list[int | float] = [len(dl) if has_len(dl) else math.inf for dl in self._loaders]
        limits = self._limits
        if self.mode == "min_size":
            total = min(lengths + list(limits or []), default=0)
        else:
            if limits is not None:
                lengths = [min(length, limit) for length, limit in zip(lengths, limits)]
            total = max(lengths, default=0) if self.mode in ("max_size_cycle", "max_size") else sum(lengths)
        if math.isinf(total):
            raise TypeError("CombinedLoader has no length: one of its iterables has none.")
        return int(total)

    def __iter__(self) -> Iterator[tuple[Any, int, int]]:
        """``(batch, batch_idx, dataloader_idx)`` in every mode, as Lightning's combined loader yields them to code
        that iterates it (a combined batch has ``dataloader_idx`` 0). The loops read :meth:`iter_batches`."""
        self._iterator = self._triples()
        return self._iterator

    def iter_batches(self) -> Iterator[Any]:
        """The batches alone: a combined batch (one batch of each iterable, in their structure) per step, or in
        'sequential' mode the iterables' batches one after another, each cut at its limit."""
        self._iterator = self._sequential() if self.mode == "sequential" else self._combined()
        return self._iterator

    def _triples(self) -> Iterator[tuple[Any, int, int]]:
        if self.mode == "sequential":
            yield from self._sequential(with_indices=True)
            return
        for batch_idx, batch in enumerate(self._combined()):
            yield batch, batch_idx, 0

    def _limit(self, index: int) -> int | float:
        return self._limits[index] if self._limits is not None else math.inf

    def _limited(self, index: int) -> Iterator[Any]:
        limit = self._limit(index)
        iterator = iter(self._loaders[index])
        return iterator if math.isinf(limit) else itertools.islice(iterator, int(limit))

    def _sequential(self, with_indices: bool = False) -> Iterator[Any]:
        for dl_idx in range(len(self._loaders)):
            for batch_idx, batch in enumerate(self._limited(dl_idx)):
                yield (batch, batch_idx, dl_idx) if with_indices else batch

    def _combined(self) -> Iterator[Any]:
        # The limits cut only the length here: the loop reading it takes ``len(self)`` batches, while each iterable
        # runs (and a shorter one restarts) as without limits, which decides the batches a limited run sees.
        iterators = [iter(dl) for dl in self._loaders]
        exhausted = [False] * len(iterators)
        while True:
            items = []
            for i, it in enumerate(iterators):
                try:
                    items.append(next(it))
                except StopIteration:
                    exhausted[i] = True
                    if self.mode == "min_size":
                        return
                    if self.mode == "max_size":
                        items.append(None)
                        continue
                    if all(exhausted):  # before any restart: making an iterator draws from the global RNG
                        return
                    iterators[i] = iter(self._loaders[i])  # max_size_cycle: restart the shorter one
                    items.append(next(iterators[i]))
            if all(exhausted):
                return
            yield self._pack(items)


def _shutdown_workers_and_reset_iterator(dataloader: object) -> None:
    """Stop a dataloader's worker processes (a ``persistent_workers`` loader keeps them) and drop its iterator."""
    if hasattr(dataloader, "_iterator"):
        if isinstance(dataloader._iterator, _MultiProcessingDataLoaderIter):
            dataloader._iterator._shutdown_workers()
        dataloader._iterator = None

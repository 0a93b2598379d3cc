"""Batches of one epoch, each with whether it is the last one; resume can start mid-epoch.

A map-style ``DataLoader`` (or a ``CombinedLoader`` of sized loaders) knows its length, so batches are fetched
when the loop asks for them. Anything else (iterable datasets, lists, unsized combined loaders) is read one batch
ahead: knowing ``is_last_batch`` before
running the batch lets the final batch close an accumulation window and step epoch schedulers.

Starting at batch ``k`` of an epoch (exact resume) rebuilds a plain ``DataLoader`` over a batch sampler that
drops the first ``k`` index batches: the dropped samples are never loaded, and the order of the remaining
ones is the order the full epoch would have had.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from fulmen.utilities.combined_loader import CombinedLoader
from fulmen.utilities.data import has_len, is_iterable_dataset
from fulmen.utilities.data import sized_len as sized_len
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.loader_rebuild import with_batch_sampler
from fulmen.utilities.rank_zero import rank_zero_info

_DONE = object()


class _SkipBatchSampler:
    """The wrapped batch sampler's batches from index ``skip`` on; the skip happens on first use."""

    def __init__(self, inner: Any, skip: int) -> None:
        self.inner = inner
        self.skip = skip
        self._current: _SkippingIterator | None = None

    def __len__(self) -> int:
        return max(0, len(self.inner) - self.skip)

    def __iter__(self) -> Iterator[Any]:
        # The DataLoader iterator creates this before it draws its base seed, and a shuffling sampler draws
        # its own seed on its first step: the skip must stay lazy to keep that order of RNG draws.
        self._current = _SkippingIterator(iter(self.inner), self.skip)
        return self._current

    def prime(self) -> None:
        if self._current is not None:
            self._current.prime()


class _SkippingIterator:
    def __init__(self, inner: Iterator[Any], skip: int) -> None:
        self.inner = inner
        self.skip = skip

    def prime(self) -> None:
        while self.skip > 0:
            self.skip -= 1
            if next(self.inner, _DONE) is _DONE:
                self.skip = 0

    def __iter__(self) -> _SkippingIterator:
        return self

    def __next__(self) -> Any:
        self.prime()
        return next(self.inner)


def _skipping_loader(loader: Any, skip: int) -> tuple[Any, Callable[[], None]] | None:
    """A DataLoader like ``loader`` that starts at batch ``skip`` without loading the skipped samples."""
    if type(loader) is not DataLoader or loader.batch_sampler is None or is_iterable_dataset(loader):
        return None
    sampler = _SkipBatchSampler(loader.batch_sampler, skip)
    # a one-epoch loader: its workers end with the epoch
    return with_batch_sampler(loader, sampler, persistent=False), sampler.prime


def fetches_lazily(loader: Any) -> bool:
    """Whether the epoch's end is known from the length, so no batch is read ahead: a map-style DataLoader, or a
    CombinedLoader whose loaders all have one (reading ahead would restart a cycled loader early, drawing its
    seeds from the global RNG before the step that Lightning draws them after)."""
    if isinstance(loader, CombinedLoader):
        return has_len(loader)
    return isinstance(loader, DataLoader) and has_len(loader) and not is_iterable_dataset(loader)


class PrefetchIterator:
    """``next()`` gives ``(batch, is_last)``; ``skip`` starts the epoch at that batch index.

    ``offset``: batches of the epoch done before this iterator, which the iterable itself no longer yields (a
    loader restored to its position); they count towards ``limit`` but are not read. ``snapshot``: for data
    that keeps its own position, called before each read, so that :meth:`position` gives the state after the
    batch last handed out (or before it) even though the next one was already read ahead.
    """

    def __init__(
        self, iterable: Any, limit: int | float, skip: int = 0, quiet_base_seed: bool = False, offset: int = 0,
        snapshot: Callable[[], Any] | None = None,
    ) -> None:  # fmt: skip
        self.limit = limit
        self._quiet = quiet_base_seed
        self.fetched = skip + offset
        self._lazy = fetches_lazily(iterable)
        self._total: int | float = min(limit, len(iterable)) if self._lazy else limit
        self._snapshot = snapshot
        self._ends_itself = not self._lazy and has_len(iterable) and limit >= len(iterable)
        self._iter: Iterator[Any] | None = None
        if self.fetched < self._total:
            self._iter = self._open(iterable, skip)
        # states after the batch last handed out and before it (the same one before the first batch)
        self._after: Any = snapshot() if snapshot is not None else None
        self._before: Any = self._after
        self._next: Any = _DONE if self._lazy else self._fetch()

    def _open(self, iterable: Any, skip: int) -> Iterator[Any]:
        if skip == 0:
            return self._iter_of(iterable)
        rebuilt = _skipping_loader(iterable, skip)
        if rebuilt is not None:
            loader, prime = rebuilt
            iterator = self._iter_of(loader)
            prime()
            return iterator
        # not rebuildable (iterable dataset, custom DataLoader subclass): load and drop the skipped batches
        rank_zero_info(
            f"Resuming mid-epoch: replaying {skip} batch{'es' if skip != 1 else ''} of this epoch already trained "
            f"on (loaded and dropped: this {type(iterable).__name__} cannot start at a later batch without loading "
            "the earlier ones)."
        )
        iterator = self._iter_of(iterable)
        for _ in range(skip):
            if next(iterator, _DONE) is _DONE:
                break
        return iterator

    def _iter_of(self, iterable: Any) -> Iterator[Any]:
        """``iter(iterable)``; with ``quiet_base_seed`` a DataLoader draws its worker base seed from a private
        generator. A persistent-workers loader draws that seed only when its workers start: a resumed run,
        which starts them in a later epoch than the uninterrupted run did, must not draw it from the global
        RNG (the shuffle order of every later epoch would change)."""
        if isinstance(iterable, CombinedLoader):
            return iterable.iter_batches()  # the batches, without the (batch_idx, dataloader_idx) it yields
        if not (self._quiet and isinstance(iterable, DataLoader)):
            return iter(iterable)
        saved = iterable.generator
        iterable.generator = torch.Generator()
        try:
            return iter(iterable)
        finally:
            iterable.generator = saved

    def _fetch(self) -> Any:
        if self._iter is None:
            return _DONE
        if self.fetched >= self.limit:
            if self._ends_itself:
                # the limit is the iterable's own length: let its iterator finish, as a plain for loop would
                # (litdata's loader, for one, only then marks a restored epoch done)
                next(self._iter, None)
            self._iter = None
            return _DONE
        try:
            batch = next(self._iter)
        except StopIteration:
            self._iter = None
            return _DONE
        self.fetched += 1
        return batch

    def position(self, before_current: bool = False) -> Any:
        """The data's own state after the batch last handed out (``before_current``: before it was read)."""
        return self._before if before_current else self._after

    @property
    def done(self) -> bool:
        if self._lazy:
            return self._iter is None or self.fetched >= self._total
        return self._next is _DONE

    def __iter__(self) -> PrefetchIterator:
        return self

    def __next__(self) -> tuple[Any, bool]:
        """The next batch and whether it is the last one."""
        if self._lazy:
            if self._iter is None or self.fetched >= self._total:  # self.done, without a frame per batch
                raise StopIteration
            batch = next(self._iter)
            self.fetched += 1
            if self._snapshot is not None:
                self._before, self._after = self._after, self._snapshot()
            return batch, self.fetched >= self._total
        batch = self._next
        if batch is _DONE:
            raise StopIteration
        if self._snapshot is not None:  # before the look-ahead read: the state of "this batch done"
            self._before, self._after = self._after, self._snapshot()
        self._next = self._fetch()
        return batch, self._next is _DONE


class ProfiledPrefetchIterator(PrefetchIterator):
    """A ``PrefetchIterator`` whose every ``next()`` is recorded as ``action`` (only made when a profiler
    runs: the plain iterator's ``__next__`` stays free of any check)."""

    def __init__(
        self, iterable: Any, limit: int | float, *, profile: Callable[[str], Any], action: str, **kwargs: Any
    ) -> None:
        self._profile, self._action = profile, action
        super().__init__(iterable, limit, **kwargs)

    def __next__(self) -> tuple[Any, bool]:
        with self._profile(self._action):
            return super().__next__()


def prefetch_iterator(hooks: Any, action: str, iterable: Any, limit: int | float, **kwargs: Any) -> PrefetchIterator:
    """The loops' batches: recorded as ``action`` when the run has a profiler."""
    if hooks.profiler is None:
        return PrefetchIterator(iterable, limit, **kwargs)
    return ProfiledPrefetchIterator(iterable, limit, profile=hooks.profile, action=action, **kwargs)


__all__ = ["PrefetchIterator", "ProfiledPrefetchIterator", "fetches_lazily", "prefetch_iterator"]

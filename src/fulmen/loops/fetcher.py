"""Iterate a dataloader one batch ahead, so the loop knows which batch is the last one.

Knowing ``is_last_batch`` before running the batch is what lets the final batch of an epoch close an
accumulation window and step epoch schedulers, also for dataloaders without a length.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

_DONE = object()


class PrefetchIterator:
    def __init__(self, iterable: Any, limit: int | float) -> None:
        self.limit = limit
        self._iter: Iterator[Any] | None = iter(iterable) if limit > 0 else None
        self.fetched = 0
        self._next: Any = self._fetch()

    def _fetch(self) -> Any:
        if self._iter is None or self.fetched >= self.limit:
            return _DONE
        try:
            batch = next(self._iter)
        except StopIteration:
            self._iter = None
            return _DONE
        self.fetched += 1
        return batch

    @property
    def done(self) -> bool:
        return self._next is _DONE

    def __iter__(self) -> PrefetchIterator:
        return self

    def __next__(self) -> tuple[Any, bool]:
        """The next batch and whether it is the last one."""
        batch = self._next
        if batch is _DONE:
            raise StopIteration
        self._next = self._fetch()
        return batch, self._next is _DONE

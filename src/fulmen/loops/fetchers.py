"""``lightning.pytorch.loops.fetchers``: how the loops draw batches (one ahead when a loader's length is
unknown, to tell the last batch) is :mod:`fulmen.loops.fetcher`."""

from fulmen.loops.fetcher import PrefetchIterator, ProfiledPrefetchIterator, fetches_lazily, prefetch_iterator

__all__ = ["PrefetchIterator", "ProfiledPrefetchIterator", "fetches_lazily", "prefetch_iterator"]

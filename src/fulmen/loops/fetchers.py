"""``lightning.pytorch.loops.fetchers``: how the loops draw batches (one ahead when a loader's length is
unknown, to tell the last batch) is :mod:`fulmen.loops.fetcher`."""

from fulmen.loops.fetcher import PrefetchIterator, ProfiledPrefetchIterator, fetches_lazily, prefetch_iterator
from fulmen.utilities.combined_loader import CombinedLoader as CombinedLoader
from fulmen.utilities.data import sized_len as sized_len
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException

__all__ = ["PrefetchIterator", "ProfiledPrefetchIterator", "fetches_lazily", "prefetch_iterator"]

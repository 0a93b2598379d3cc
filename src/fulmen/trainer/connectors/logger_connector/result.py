"""Lightning's import path ``lightning.pytorch.trainer.connectors.logger_connector.result``: what ``self.log``
stores is :mod:`fulmen.runtime.results` (a :class:`ResultCollection` per stage run, a :class:`ResultMetric`
per key)."""

from fulmen.runtime.results import _WARNINGS as warning_cache  # noqa: F401  (the cache of self.log's warnings)
from fulmen.runtime.results import LogMeta, ResultCollection, ResultMetric, to_scalars
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.apply_func import convert_tensors_to_scalars as convert_tensors_to_scalars
from fulmen.utilities.apply_func import move_data_to_device as move_data_to_device
from fulmen.utilities.data import extract_batch_size as extract_batch_size
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import WarningCache as WarningCache
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning as PossibleUserWarning

__all__ = ["LogMeta", "ResultCollection", "ResultMetric", "to_scalars"]

# Lightning's name of the class (made with the same `training` argument, one per stage run): the very class,
# so that patching `_ResultCollection.log` reaches every `self.log` call
_ResultCollection = ResultCollection
# and of one logged key's record: libraries check `isinstance(m, _ResultMetric)` on `trainer._results.result_metrics`
_ResultMetric = ResultMetric


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "recursive_detach": "fulmen.utilities.memory.recursive_detach",
})  # fmt: skip

"""Lightning's import path ``lightning.pytorch.loops.prediction_loop``: ``trainer.predict`` runs
:class:`fulmen.loops.evaluation_loop.PredictionLoop`."""

from fulmen.loops.evaluation_loop import PredictionLoop
from fulmen.runtime.state import RunningStage as RunningStage
from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.utilities.apply_func import move_data_to_device as move_data_to_device
from fulmen.utilities.combined_loader import CombinedLoader as CombinedLoader
from fulmen.utilities.data import has_len_all_ranks as has_len_all_ranks
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import WarningCache as WarningCache

__all__ = ["PredictionLoop"]

# Lightning's name for this loop (its test suites and some programs import or patch it)
_PredictionLoop = PredictionLoop


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "BasePredictionWriter": "fulmen.callbacks.prediction_writer.BasePredictionWriter",
    "is_param_in_hook_signature": "fulmen.utilities.signature_utils.is_param_in_hook_signature",
})  # fmt: skip

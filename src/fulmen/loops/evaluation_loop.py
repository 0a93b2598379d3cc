"""``lightning.pytorch.loops.evaluation_loop``: validation and test runs (the sanity check and the validation
inside fit too) are :class:`fulmen.loops.evaluation.EvaluationLoop`."""

from fulmen.loops.evaluation import EvaluationLoop
from fulmen.runtime.state import RunningStage as RunningStage
from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.combined_loader import CombinedLoader as CombinedLoader
from fulmen.utilities.data import has_len_all_ranks as has_len_all_ranks
from fulmen.utilities.exceptions import SIGTERMException as SIGTERMException
from fulmen.utilities.imports import _RICH_AVAILABLE as _RICH_AVAILABLE
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import is_overridden as is_overridden

__all__ = ["EvaluationLoop", "RestartStage"]

# Lightning's name for this loop (its test suites and some programs import or patch it)
_EvaluationLoop = EvaluationLoop


class RestartStage:
    """Whether a restored evaluation run restarts in the middle, as plain strings (what code that reads a
    Lightning evaluation loop's restart stage compares with)."""

    NONE = "none"
    RESTARTED_MID_EVALUATION = "restarted_mid_evaluation"


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "is_param_in_hook_signature": "fulmen.utilities.signature_utils.is_param_in_hook_signature",
})  # fmt: skip

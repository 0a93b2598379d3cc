"""``lightning.pytorch.loops.fit_loop``: fulmen's fit loop is :class:`fulmen.loops.fit.FitLoop`; where a
checkpoint resumes it is kept as a :class:`~fulmen.runtime.state.LoopPhase` (see :mod:`fulmen.loops.resume`)."""

from fulmen.loops.fit import FitLoop
from fulmen.runtime.state import LoopPhase
from fulmen.runtime.state import RunningStage as RunningStage
from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.utilities.combined_loader import CombinedLoader as CombinedLoader
from fulmen.utilities.data import has_len_all_ranks as has_len_all_ranks
from fulmen.utilities.data import sized_len as sized_len
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.exceptions import SIGTERMException as SIGTERMException
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import rank_zero_debug as rank_zero_debug
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning as PossibleUserWarning

__all__ = ["FitLoop", "LoopPhase", "RestartStage"]

# Lightning's name for this loop (its test suites and some programs import or patch it)
_FitLoop = FitLoop


class RestartStage:
    """Where in an epoch a restored fit loop restarts, as plain strings (what code that reads a Lightning fit
    loop's restart stage compares with)."""

    NONE = "none"
    RESTARTED_ON_EPOCH_START = "restarted_on_epoch_start"
    RESTARTED_MID_EPOCH = "restarted_mid_epoch"
    RESTARTED_ON_EPOCH_END = "restarted_on_epoch_end"
    RESUMED_ON_EPOCH_END = "resumed_on_epoch_end"

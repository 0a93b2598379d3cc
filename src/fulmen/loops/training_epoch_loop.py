"""``lightning.pytorch.loops.training_epoch_loop``: one training epoch is
:class:`fulmen.loops.training_epoch.TrainingEpochLoop`."""

from fulmen.loops.training_epoch import TrainingEpochLoop
from fulmen.runtime.state import RunningStage as RunningStage
from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.exceptions import SIGTERMException as SIGTERMException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import WarningCache as WarningCache
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning as PossibleUserWarning

__all__ = ["RestartStage", "TrainingEpochLoop"]

# Lightning's name for this loop (its test suites and some programs import or patch it)
_TrainingEpochLoop = TrainingEpochLoop


class RestartStage:
    """Where a restored training epoch restarts, as plain strings (what code that reads a Lightning epoch
    loop's restart stage compares with)."""

    NONE = "none"
    RESTARTED_ON_TRAIN_BATCH_END = "restarted_on_train_batch_end"
    RESTARTED_ON_LAST = "restarted_on_last"


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "is_param_in_hook_signature": "fulmen.utilities.signature_utils.is_param_in_hook_signature",
})  # fmt: skip

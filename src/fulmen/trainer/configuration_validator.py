"""``lightning.pytorch.trainer.configuration_validator``: before a stage runs, :class:`fulmen.trainer.runner.
StageRunner` checks that the model and data have what the stage needs (``training_step``,
``configure_optimizers`` and training data for fit; ``validation_step`` / ``test_step`` for validate / test;
predict data for predict) and that manual optimization is not combined with ``gradient_clip_val``,
``accumulate_grad_batches`` or an ``optimizer_idx`` argument; it raises ``MisconfigurationException`` naming
what is missing."""

from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.trainer.runner import StageRunner
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import rank_zero_deprecation as rank_zero_deprecation
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning as PossibleUserWarning

__all__ = ["StageRunner"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "is_param_in_hook_signature": "fulmen.utilities.signature_utils.is_param_in_hook_signature",
})  # fmt: skip

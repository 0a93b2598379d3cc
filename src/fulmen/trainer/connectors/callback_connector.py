"""``lightning.pytorch.trainer.connectors.callback_connector``: the callbacks the Trainer's flags imply, and
those ``configure_callbacks()`` adds."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.core.hooks import Callback
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _RICH_AVAILABLE as _RICH_AVAILABLE
from fulmen.utilities.imports import RequirementCache as RequirementCache
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from fulmen.trainer.flags import TrainerConfig
    from fulmen.trainer.trainer import Trainer

__all__ = ["attach_model_callbacks", "build_callbacks"]


def build_callbacks(config: TrainerConfig) -> list[Callback]:
    """The user's callbacks plus those the flags ask for: a progress bar, a ModelCheckpoint, a ModelSummary,
    a Timer (max_time), a GradientAccumulationScheduler (1.x accumulate dict) and StochasticWeightAveraging
    (1.x stochastic_weight_avg). A flag that contradicts a given callback is refused."""
    from fulmen.callbacks.gradient_accumulation_scheduler import GradientAccumulationScheduler
    from fulmen.callbacks.model_checkpoint import Checkpoint, ModelCheckpoint
    from fulmen.callbacks.model_summary import ModelSummary
    from fulmen.callbacks.progress import ProgressBar, TQDMProgressBar
    from fulmen.callbacks.stochastic_weight_avg import StochasticWeightAveraging
    from fulmen.callbacks.timer import Timer

    result: list[Callback] = list(config.callbacks)
    bars = [cb for cb in result if isinstance(cb, ProgressBar)]
    if len(bars) > 1:
        raise MisconfigurationException(
            f"You added multiple progress bar callbacks to the Trainer ({', '.join(type(b).__name__ for b in bars)})"
            ", but only one can be used. Keep one."
        )
    if bars and not config.enable_progress_bar:
        raise MisconfigurationException(
            f"Trainer(enable_progress_bar=False) was set (`enable_progress_bar=False` but found "
            f"`{type(bars[0]).__name__}` in callbacks). Remove one of them."
        )
    if not bars and config.enable_progress_bar:
        result.append(TQDMProgressBar())
    checkpoints = [cb for cb in result if isinstance(cb, Checkpoint)]
    if checkpoints and not config.enable_checkpointing:
        raise MisconfigurationException(
            "Trainer(enable_checkpointing=False) was set (`enable_checkpointing=False` but found "
            f"`{type(checkpoints[0]).__name__}` in callbacks). Remove one of them."
        )
    if config.enable_checkpointing and not checkpoints:
        result.append(ModelCheckpoint())
    if config.enable_model_summary and not any(isinstance(cb, ModelSummary) for cb in result):
        result.append(ModelSummary(max_depth=1))
    if not config.enable_model_summary:
        result = [cb for cb in result if not isinstance(cb, ModelSummary)]
    if config.max_time is not None:
        if any(isinstance(cb, Timer) for cb in result):
            rank_zero_info("Ignoring `Trainer(max_time=...)`: the callbacks list already contains a Timer, used instead.")
        else:
            result.append(Timer(duration=config.max_time, interval="step"))
    if config.accumulation_schedule is not None:
        if any(isinstance(cb, GradientAccumulationScheduler) for cb in result):
            raise MisconfigurationException(
                "Trainer(accumulate_grad_batches=<dict>) and a GradientAccumulationScheduler in callbacks both "
                "schedule accumulation. Keep one of them."
            )
        result.append(GradientAccumulationScheduler(config.accumulation_schedule))
    if config.stochastic_weight_avg and not any(isinstance(cb, StochasticWeightAveraging) for cb in result):
        result.append(StochasticWeightAveraging(swa_lrs=None))  # 1.x's default: each group keeps its rate
    return _reorder(result)


def attach_model_callbacks(callbacks: list[Callback], extra: Any) -> list[Callback]:
    """Add ``configure_callbacks()``'s callbacks, replacing trainer callbacks of the same type."""
    if not extra:
        return callbacks
    model_callbacks = [extra] if isinstance(extra, Callback) else list(extra)
    types = {type(cb) for cb in model_callbacks}
    kept = [cb for cb in callbacks if type(cb) not in types]
    return _reorder(kept + model_callbacks)


def _reorder(callbacks: list[Callback]) -> list[Callback]:
    """The finders first (they run trial fits before the other callbacks see the real one), checkpoint callbacks
    last (they see what the other callbacks did in the same hook); the order within each group is kept."""
    from fulmen.callbacks.batch_size_finder import BatchSizeFinder
    from fulmen.callbacks.lr_finder import LearningRateFinder

    tuners = [cb for cb in callbacks if isinstance(cb, BatchSizeFinder | LearningRateFinder)]
    checkpoints = [cb for cb in callbacks if getattr(cb, "_is_checkpoint_callback", False) and cb not in tuners]
    others = [cb for cb in callbacks if cb not in tuners and cb not in checkpoints]
    return tuners + others + checkpoints


class _CallbackConnector:
    """``trainer._callback_connector``: the ordering rule and the model's callbacks, for libraries written
    against Lightning's trainer internals (finetuning-scheduler orders the callbacks it adds with
    ``_reorder_callbacks``). A view over the trainer; fulmen's own code calls the functions above."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    @staticmethod
    def _reorder_callbacks(callbacks: list[Callback]) -> list[Callback]:
        return _reorder(callbacks)

    def _attach_model_callbacks(self) -> None:
        """Add the module's ``configure_callbacks()`` to the trainer's callbacks (replacing those of its types)."""
        trainer = self.trainer
        extra = trainer.run_context.hooks.call_module("configure_callbacks")
        trainer.callbacks = attach_model_callbacks(trainer.callbacks, extra)


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "BatchSizeFinder": "fulmen.callbacks.batch_size_finder.BatchSizeFinder",
    "Checkpoint": "fulmen.callbacks.checkpoint.Checkpoint",
    "LearningRateFinder": "fulmen.callbacks.lr_finder.LearningRateFinder",
    "LitLogger": "fulmen.loggers.litlogger.LitLogger",
    "ModelCheckpoint": "fulmen.callbacks.model_checkpoint.ModelCheckpoint",
    "ModelSummary": "fulmen.callbacks.model_summary.ModelSummary",
    "ProgressBar": "fulmen.callbacks.progress.progress_bar.ProgressBar",
    "RichModelSummary": "fulmen.callbacks.rich_model_summary.RichModelSummary",
    "RichProgressBar": "fulmen.callbacks.progress.rich_progress.RichProgressBar",
    "TQDMProgressBar": "fulmen.callbacks.progress.tqdm_progress.TQDMProgressBar",
    "Timer": "fulmen.callbacks.timer.Timer",
})  # fmt: skip

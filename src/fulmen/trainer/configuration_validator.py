"""Before a stage runs: does the model (and its data) have what the stage needs?

``_verify_loop_configurations(trainer)`` runs once per stage, after the module's ``configure_callbacks`` and before
any set-up, and raises ``MisconfigurationException`` naming what is missing: ``training_step``,
``configure_optimizers`` and training data for fit; ``validation_step`` / ``test_step`` for validate / test;
predict data for predict. It also refuses manual optimization combined with ``gradient_clip_val``,
``accumulate_grad_batches`` or an ``optimizer_idx`` argument, and both ``configure_model`` and the 1.x
``configure_sharded_model``.

Each check is a function of this module with Lightning's name, looked up when it runs: tests written for
Lightning wrap or replace them here (``mock.patch("...configuration_validator.__verify_train_val_loop_configuration",
wraps=...)``) to see that a CLI run reached the check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.runtime.data import step_overridden
from fulmen.runtime.hooks import training_step_takes_optimizer_idx
from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.exceptions import UnsupportedSetupError
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import assigned_on_instance
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import rank_zero_deprecation as rank_zero_deprecation
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning as PossibleUserWarning

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


def _verify_loop_configurations(trainer: Trainer) -> None:
    """Every check the running stage (``trainer.state.fn``) needs, on ``trainer.lightning_module``."""
    model = trainer.lightning_module
    fn = trainer.state.fn
    if fn == TrainerFn.FITTING:
        __verify_train_val_loop_configuration(trainer, model)
        __verify_manual_optimization_support(trainer, model)
    elif fn == TrainerFn.VALIDATING:
        __verify_eval_loop_configuration(model, "val")
    elif fn == TrainerFn.TESTING:
        __verify_eval_loop_configuration(model, "test")
    elif fn == TrainerFn.PREDICTING:
        __verify_predict_data(trainer)
    __verify_configure_model_configuration(model)


def __verify_train_val_loop_configuration(trainer: Trainer, model: LightningModule) -> None:
    """fit: a ``training_step``, ``configure_optimizers`` (automatic optimization) and training data; a warning
    when only one of validation data and ``validation_step`` exists (the validation loop is then skipped)."""
    context = trainer.run_context
    data, name = context.data, type(model).__name__
    if not step_overridden(model, "train"):
        raise MisconfigurationException(
            f"{name} has no `training_step()`; trainer.fit() needs one. Implement "
            "training_step(self, batch, batch_idx) and return the loss."
        )
    if model.automatic_optimization and not context.hooks.module_overrides("configure_optimizers"):
        raise MisconfigurationException(
            f"{name} has no `configure_optimizers()`; trainer.fit() needs one to know what to optimise. "
            "Return e.g. torch.optim.Adam(self.parameters())."
        )
    if not data.has_source("train"):
        raise MisconfigurationException(
            "No training data: pass `train_dataloaders` to trainer.fit(), give a datamodule with "
            "`train_dataloader()`, or implement `train_dataloader()` in your LightningModule."
        )
    # Lightning's words and classes, so that filters and searches written for them match
    if data.has_source("val") and not step_overridden(model, "val"):
        rank_zero_warn("You passed in a `val_dataloader` but have no `validation_step`. Skipping val loop.")
    elif step_overridden(model, "val") and not data.has_source("val"):
        rank_zero_warn(
            "You defined a `validation_step` but have no `val_dataloader`. Skipping val loop.",
            category=PossibleUserWarning,
        )


def __verify_eval_loop_configuration(model: LightningModule, stage: str) -> None:
    """validate / test: the module has the stage's step."""
    step, entry = ("validation_step", "validate") if stage == "val" else ("test_step", "test")
    if not step_overridden(model, stage):
        raise MisconfigurationException(f"trainer.{entry}() needs `{step}()` in {type(model).__name__}.")


def __verify_predict_data(trainer: Trainer) -> None:
    """predict: data to predict on (``predict_step`` has a default: ``forward`` on the batch)."""
    if not trainer.run_context.data.has_source("predict"):
        raise MisconfigurationException(
            "No predict data: pass `dataloaders` to trainer.predict(), give a datamodule with "
            "`predict_dataloader()`, or implement `predict_dataloader()`."
        )


def __verify_manual_optimization_support(trainer: Trainer, model: LightningModule) -> None:
    """Manual optimization: the Trainer's gradient clipping and accumulation, and ``optimizer_idx``, which only
    automatic optimization passes, are refused (the module steps its optimizers itself)."""
    if model.automatic_optimization:
        return
    config = trainer.run_context.config
    # Lightning's wording, so that searches for the message find the same answers
    if config.gradient_clip_val is not None and config.gradient_clip_val > 0:
        raise MisconfigurationException(
            "Automatic gradient clipping is not supported for manual optimization."
            f" Remove `Trainer(gradient_clip_val={config.gradient_clip_val})`"
            " or switch to automatic optimization."
        )
    if config.accumulate_grad_batches != 1:
        raise MisconfigurationException(
            "Automatic gradient accumulation is not supported for manual optimization."
            f" Remove `Trainer(accumulate_grad_batches={config.accumulate_grad_batches})`"
            " or switch to automatic optimization."
        )
    if training_step_takes_optimizer_idx(model).named:  # a RuntimeError in Lightning: both catch it
        raise UnsupportedSetupError(
            f"{type(model).__name__}.training_step takes `optimizer_idx`, which is passed only under automatic "
            "optimization. With `automatic_optimization = False`, remove the argument and get the "
            "optimizers with `opt1, opt2 = self.optimizers()`."
        )


def __verify_configure_model_configuration(model: LightningModule) -> None:
    """The 1.x ``configure_sharded_model`` hook is still called (before ``configure_model``) when the class
    defines it, with a deprecation warning; defining both is refused."""
    if not is_overridden("configure_sharded_model", model):
        return
    name = type(model).__name__
    if is_overridden("configure_model", model) or assigned_on_instance("configure_model", model):
        raise UnsupportedSetupError(
            f"Both `{name}.configure_model`, and `{name}.configure_sharded_model` are overridden. The latter"
            " is deprecated and it should be replaced with the former."
        )
    rank_zero_deprecation(
        f"You have overridden `{name}.configure_sharded_model` which is deprecated. Please override the"
        " `configure_model` hook instead. Instantiation with the newer hook will be created on the device"
        " right away and have the right data type depending on the precision setting in the Trainer."
    )


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "is_param_in_hook_signature": "fulmen.utilities.signature_utils.is_param_in_hook_signature",
})  # fmt: skip

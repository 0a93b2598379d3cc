"""The callbacks and loggers the Trainer's flags imply, made in one place; the model a stage runs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from fulmen.callbacks.callback import Callback
from fulmen.core.module import LightningModule, unwrap_compiled
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.model_helpers import is_mock
from fulmen.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from fulmen.loggers.logger import Logger
    from fulmen.trainer.config import TrainerConfig


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
        result.append(StochasticWeightAveraging())
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
    """Checkpoint callbacks run last, so they see what the other callbacks did in the same hook."""
    checkpoints = [cb for cb in callbacks if getattr(cb, "_is_checkpoint_callback", False)]
    others = [cb for cb in callbacks if not getattr(cb, "_is_checkpoint_callback", False)]
    return others + checkpoints


def build_loggers(config: TrainerConfig, default_root_dir: str) -> list[Logger]:
    from fulmen.loggers.logger import DummyLogger, Logger

    logger = config.logger
    if config.fast_dev_run:  # a logger exists (self.logger.experiment works) but keeps nothing
        return [] if logger is False else [DummyLogger()]
    if logger is None or logger is True:
        return [_default_logger(default_root_dir)]
    if logger is False:
        return []
    if isinstance(logger, Logger) or is_mock(logger):  # a test's Mock records what it is told
        return [logger]
    if isinstance(logger, Iterable) and not isinstance(logger, str):  # a name is not a list of loggers
        loggers = list(logger)
        for lg in loggers:
            if not isinstance(lg, Logger) and not is_mock(lg):
                raise MisconfigurationException(
                    f"logger contains {lg!r}; every logger must subclass fulmen.loggers.Logger."
                )
        return loggers
    raise MisconfigurationException(f"logger={logger!r} must be True, False, a Logger or a list of Loggers.")


def _default_logger(default_root_dir: str) -> Logger:
    """TensorBoard when it is installed, else CSV (as Lightning does)."""
    import importlib.util

    from fulmen.loggers.csv_logs import CSVLogger

    if importlib.util.find_spec("tensorboard") is not None:
        from fulmen.loggers.tensorboard import TensorBoardLogger

        return TensorBoardLogger(save_dir=default_root_dir, name="lightning_logs")
    return CSVLogger(save_dir=default_root_dir, name="lightning_logs")


def prepare_model(model: Any, compile_options: bool | dict[str, Any], fn: str) -> LightningModule:
    """The LightningModule a stage runs: ``Trainer(compile=...)`` applied (as if the user had passed
    ``torch.compile(model, **options)``), a compiled module unwrapped, anything else refused."""
    if compile_options is not False and isinstance(model, LightningModule) and model._compiled_from is None:
        options = compile_options if isinstance(compile_options, dict) else {}
        model = unwrap_compiled(torch.compile(model, **options))
    model = unwrap_compiled(model)
    if not isinstance(model, LightningModule):
        raise TypeError(
            f"`model` must be a `LightningModule`: trainer.{fn}() got `{type(model).__name__}`. Subclass "
            "fulmen.LightningModule (or pass torch.compile(your_lightning_module))."
        )
    return model

"""Build the default callbacks and loggers from the Trainer's flags."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from fulmen.callbacks.callback import Callback
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from fulmen.loggers.logger import Logger
    from fulmen.trainer.trainer import Trainer


def build_callbacks(
    trainer: Trainer,
    callbacks: list[Callback] | Callback | None,
    enable_progress_bar: bool,
    enable_model_summary: bool,
    enable_checkpointing: bool,
) -> list[Callback]:
    from fulmen.callbacks.model_checkpoint import Checkpoint, ModelCheckpoint
    from fulmen.callbacks.model_summary import ModelSummary
    from fulmen.callbacks.progress import ProgressBar, TQDMProgressBar
    from fulmen.callbacks.timer import Timer

    if callbacks is None:
        result: list[Callback] = []
    elif isinstance(callbacks, Callback):
        result = [callbacks]
    elif isinstance(callbacks, Iterable):
        result = list(callbacks)
    else:
        raise MisconfigurationException(f"callbacks={callbacks!r} must be a Callback or a list of Callbacks.")
    for cb in result:
        if not isinstance(cb, Callback):
            raise MisconfigurationException(
                f"callbacks contains {cb!r}, a {type(cb).__name__}; every callback must subclass fulmen.Callback."
            )
    bars = [cb for cb in result if isinstance(cb, ProgressBar)]
    if len(bars) > 1:
        raise MisconfigurationException("callbacks contains more than one progress bar; keep one.")
    if bars and not enable_progress_bar:
        raise MisconfigurationException(
            "Trainer(enable_progress_bar=False) was set, but callbacks contains a progress bar. Remove one of them."
        )
    if not bars and enable_progress_bar:
        result.append(TQDMProgressBar())
    checkpoints = [cb for cb in result if isinstance(cb, Checkpoint)]
    if checkpoints and not enable_checkpointing:
        raise MisconfigurationException(
            "Trainer(enable_checkpointing=False) was set, but callbacks contains "
            f"{type(checkpoints[0]).__name__}. Remove one of them."
        )
    if enable_checkpointing and not checkpoints:
        result.append(ModelCheckpoint())
    summaries = [cb for cb in result if isinstance(cb, ModelSummary)]
    if enable_model_summary and not summaries:
        result.append(ModelSummary(max_depth=1))
    if not enable_model_summary:
        result = [cb for cb in result if not isinstance(cb, ModelSummary)]
    max_time = trainer._loop_config.max_time
    if max_time is not None:
        if any(isinstance(cb, Timer) for cb in result):
            rank_zero_info("A Timer callback was given: it is used instead of Trainer(max_time=...).")
        else:
            result.append(Timer(duration=max_time, interval="step"))
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


def build_loggers(trainer: Trainer, logger: Any) -> list[Logger]:
    from fulmen.loggers.logger import Logger

    if trainer._loop_config.fast_dev_run:
        return []
    if logger is None or logger is True:
        return [_default_logger(trainer)]
    if logger is False:
        return []
    if isinstance(logger, Logger):
        return [logger]
    if isinstance(logger, Iterable):
        loggers = list(logger)
        for lg in loggers:
            if not isinstance(lg, Logger):
                raise MisconfigurationException(
                    f"logger contains {lg!r}; every logger must subclass fulmen.loggers.Logger."
                )
        return loggers
    raise MisconfigurationException(f"logger={logger!r} must be True, False, a Logger or a list of Loggers.")


def _default_logger(trainer: Trainer) -> Logger:
    """TensorBoard when it is installed, else CSV (as Lightning does)."""
    import importlib.util

    from fulmen.loggers.csv_logs import CSVLogger

    if importlib.util.find_spec("tensorboard") is not None:
        from fulmen.loggers.tensorboard import TensorBoardLogger

        return TensorBoardLogger(save_dir=trainer.default_root_dir, name="lightning_logs")
    return CSVLogger(save_dir=trainer.default_root_dir, name="lightning_logs")

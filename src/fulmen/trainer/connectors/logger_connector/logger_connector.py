"""``lightning.pytorch.trainer.connectors.logger_connector.logger_connector``: the loggers the Trainer's
``logger`` flag implies (:func:`build_loggers`); how logged values reach loggers, callbacks and the progress
bar is :class:`fulmen.runtime.metrics.MetricsHub`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from fulmen.runtime.metrics import MetricsHub
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _TENSORBOARD_AVAILABLE as _TENSORBOARD_AVAILABLE
from fulmen.utilities.imports import _TENSORBOARDX_AVAILABLE as _TENSORBOARDX_AVAILABLE
from fulmen.utilities.model_helpers import is_mock

if TYPE_CHECKING:
    from fulmen.loggers.logger import Logger
    from fulmen.trainer.config import TrainerConfig

__all__ = ["MetricsHub", "build_loggers"]


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
    """TensorBoard when it is installed, else CSV: the same files and folders a Lightning run leaves."""
    import importlib.util

    from fulmen.loggers.csv_logs import CSVLogger

    if importlib.util.find_spec("tensorboard") is not None:
        from fulmen.loggers.tensorboard import TensorBoardLogger

        return TensorBoardLogger(save_dir=default_root_dir, name="lightning_logs")
    return CSVLogger(save_dir=default_root_dir, name="lightning_logs")

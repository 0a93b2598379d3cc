"""Lightning's import path ``lightning.pytorch.trainer.connectors.logger_connector.logger_connector``: the
loggers the Trainer's ``logger`` flag implies (:func:`build_loggers`); how logged values reach loggers,
callbacks and the progress bar is :class:`fulmen.runtime.metrics.MetricsHub`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from fulmen.runtime.metrics import MetricsHub
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.apply_func import convert_tensors_to_scalars as convert_tensors_to_scalars
from fulmen.utilities.apply_func import move_data_to_device as move_data_to_device
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _TENSORBOARD_AVAILABLE as _TENSORBOARD_AVAILABLE
from fulmen.utilities.imports import _TENSORBOARDX_AVAILABLE as _TENSORBOARDX_AVAILABLE
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import is_mock
from fulmen.utilities.rank_zero import WarningCache as WarningCache
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info

if TYPE_CHECKING:
    from fulmen.loggers.logger import Logger
    from fulmen.trainer.flags import TrainerConfig

warning_cache = WarningCache()  # Lightning's module-level cache, for code that warns through it

# Lightning's name for the object at ``trainer._logger_connector`` (its tests patch its methods by this path)
_LoggerConnector = MetricsHub

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
    """TensorBoard when ``tensorboard`` or ``tensorboardX`` is installed (the TensorBoardLogger writes through
    either), else CSV, with Lightning's warning: the same files and folders a Lightning run leaves. Under a
    SLURM batch job the version is the job's id (``version_<SLURM_JOB_ID>``), as in Lightning."""
    from fulmen.loggers.csv_logs import CSVLogger

    if _TENSORBOARD_AVAILABLE or _TENSORBOARDX_AVAILABLE:
        from fulmen.loggers.tensorboard import TensorBoardLogger
        from fulmen.plugins.environments import SLURMEnvironment

        return TensorBoardLogger(save_dir=default_root_dir, name="lightning_logs", version=SLURMEnvironment.job_id())
    warning_cache.warn(
        "Starting from v1.9.0, `tensorboardX` has been removed as a dependency of the `lightning.pytorch` package, "
        "due to potential conflicts with other packages in the ML ecosystem. For this reason, `logger=True` will "
        "use `CSVLogger` as the default logger, unless the `tensorboard` or `tensorboardX` packages are found. "
        "Please `pip install lightning[extra]` or one of them to enable TensorBoard support by default"
    )
    return CSVLogger(save_dir=default_root_dir, name="lightning_logs")


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "CSVLogger": "fulmen.loggers.csv_logs.CSVLogger",
    "LitLogger": "fulmen.loggers.litlogger.LitLogger",
    "Logger": "fulmen.loggers.logger.Logger",
    "SLURMEnvironment": "fulmen.plugins.environments.SLURMEnvironment",
    "TensorBoardLogger": "fulmen.loggers.tensorboard.TensorBoardLogger",
})  # fmt: skip

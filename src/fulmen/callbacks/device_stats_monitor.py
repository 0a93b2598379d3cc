"""``DeviceStatsMonitor``: log the device's statistics (CUDA memory, or CPU / RAM through ``psutil``) around
training and evaluation batches, at the trainer's logging steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.accelerators import cpu as _cpu  # `_cpu.get_cpu_stats` read when logging: patching it counts
from fulmen.core.hooks import Callback
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _PSUTIL_AVAILABLE as _PSUTIL_AVAILABLE
from fulmen.utilities.imports import require

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer import Trainer


class DeviceStatsMonitor(Callback):
    """Log the accelerator's statistics at the start and end of each logged training batch (every
    ``log_every_n_steps``) and of validation / test batches, under
    ``DeviceStatsMonitor.<hook>/<statistic>`` (for instance ``DeviceStatsMonitor.on_train_batch_end/cpu_percent``
    or ``.../allocated_bytes.all.current`` on a GPU). ``cpu_stats``: also log CPU and RAM on a GPU (True),
    never (False); by default only when the model runs on the CPU. Reading the statistics costs a few
    microseconds and no device synchronisation."""

    def __init__(self, cpu_stats: bool | None = None) -> None:
        self._cpu_stats = cpu_stats

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        if not trainer.loggers:
            raise MisconfigurationException(
                "Cannot use `DeviceStatsMonitor` callback with `Trainer(logger=False)`: it logs to the loggers. "
                "Pass a logger, e.g. Trainer(logger=CSVLogger('logs'))."
            )
        if self._cpu_stats or (self._cpu_stats is None and trainer.strategy.root_device.type == "cpu"):
            # fails now, naming the package, when psutil is missing (this module's flag, read now)
            require("psutil", "psutil", "DeviceStatsMonitor (CPU statistics)", available=_PSUTIL_AVAILABLE)

    def _log(self, trainer: Trainer, hook: str) -> None:
        if not trainer.loggers or not trainer.run_context.metrics.should_log_step():
            return
        device = trainer.strategy.root_device
        if device.type == "cpu":
            stats = _cpu.get_cpu_stats() if self._cpu_stats is not False else {}
        else:
            stats = dict(trainer.accelerator.get_device_stats(device))
            if self._cpu_stats:
                stats.update(_cpu.get_cpu_stats())
        if not stats:
            return
        prefix = f"{type(self).__qualname__}.{hook}"
        metrics = {f"{prefix}/{key}": value for key, value in stats.items()}
        step = trainer.run_context.progress.batches_that_stepped
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self._log(trainer, "on_train_batch_start")

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._log(trainer, "on_train_batch_end")

    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._log(trainer, "on_validation_batch_start")

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._log(trainer, "on_validation_batch_end")

    def on_test_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._log(trainer, "on_test_batch_start")

    def on_test_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._log(trainer, "on_test_batch_end")

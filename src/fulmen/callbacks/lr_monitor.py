"""``LearningRateMonitor``: log each optimizer's learning rate (and optionally momentum, weight decay)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from fulmen.callbacks.callback import Callback
from fulmen.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


class LearningRateMonitor(Callback):
    """Logs ``lr-<Optimizer>`` (``/pg<i>`` per parameter group when there are several) to the loggers."""

    def __init__(
        self, logging_interval: str | None = None, log_momentum: bool = False, log_weight_decay: bool = False
    ) -> None:
        super().__init__()
        if logging_interval not in (None, "step", "epoch"):
            raise MisconfigurationException(
                f"LearningRateMonitor(logging_interval={logging_interval!r}) must be None, 'step' or 'epoch'."
            )
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.lrs: dict[str, list[float]] = {}
        self._names: list[tuple[str, Any, str | None]] = []

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.loggers:
            raise MisconfigurationException(
                "LearningRateMonitor needs a logger, but the Trainer has none (logger=False). Enable a logger "
                "or remove the callback."
            )
        entries: list[tuple[str, Any, str | None]] = []
        scheduled = set()
        for config in trainer.lr_scheduler_configs:
            opt = config.scheduler.optimizer
            scheduled.add(id(opt))
            entries.append((config.name or f"lr-{type(opt).__name__}", opt, config.interval))
        for opt in trainer.optimizers:
            if id(opt) not in scheduled:
                entries.append((f"lr-{type(opt).__name__}", opt, None))
        counts = Counter(name for name, _, _ in entries)
        seen: Counter[str] = Counter()
        self._names = []
        for name, opt, interval in entries:
            if counts[name] > 1:
                suffix = f"-{seen[name]}" if seen[name] else ""
                seen[name] += 1
                name = f"{name}{suffix}"
            self._names.append((name, opt, interval))
        self.lrs = {key: [] for key in self._keys()}

    def _keys(self) -> list[str]:
        keys = []
        for name, opt, _ in self._names:
            groups = opt.param_groups
            for i in range(len(groups)):
                keys.append(f"{name}/pg{i + 1}" if len(groups) > 1 else name)
        return keys

    def _stats(self, interval: str) -> dict[str, float]:
        stats: dict[str, float] = {}
        for name, opt, sched_interval in self._names:
            if self.logging_interval is None and sched_interval not in (None, interval):
                continue
            groups = opt.param_groups
            for i, group in enumerate(groups):
                key = f"{name}/pg{i + 1}" if len(groups) > 1 else name
                stats[key] = float(group["lr"])
                self.lrs.setdefault(key, []).append(stats[key])
                if self.log_momentum:
                    momentum = group.get("betas", (group.get("momentum", 0.0),))[0]
                    stats[f"{name}-momentum" + (f"/pg{i + 1}" if len(groups) > 1 else "")] = float(momentum)
                if self.log_weight_decay and "weight_decay" in group:
                    stats[f"{name}-weight_decay" + (f"/pg{i + 1}" if len(groups) > 1 else "")] = float(
                        group["weight_decay"]
                    )
        return stats

    def _log(self, trainer: Trainer, interval: str) -> None:
        stats = self._stats(interval)
        if not stats:
            return
        step = trainer.run_context.progress.batches_that_stepped
        for logger in trainer.loggers:
            logger.log_metrics(stats, step=step)

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        if self.logging_interval == "epoch" or not trainer.run_context.metrics.should_log_step():
            return
        self._log(trainer, "step")

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.logging_interval == "step":
            return
        self._log(trainer, "epoch")

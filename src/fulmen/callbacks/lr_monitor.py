"""``LearningRateMonitor``: log each optimizer's learning rate (and optionally momentum, weight decay)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import torch

from fulmen.core.hooks import Callback
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_warn
from fulmen.utilities.types import LRSchedulerConfig as LRSchedulerConfig

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


class LearningRateMonitor(Callback):
    """Logs ``lr-<Optimizer>`` (``/pg<i>`` per parameter group when there are several) to the loggers."""

    def __init__(
        self, logging_interval: str | None = None, log_momentum: bool = False, log_weight_decay: bool = False
    ) -> None:
        # not cooperative, as Lightning's: a subclass mixing in another class calls that class's __init__ itself,
        # and it must run once
        if logging_interval not in (None, "step", "epoch"):
            raise MisconfigurationException(
                f"LearningRateMonitor(logging_interval={logging_interval!r}) must be None, 'step' or 'epoch'."
            )
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.lrs: dict[str, list[float]] = {}
        self.last_momentum_values: dict[str, float] = {}
        self.last_weight_decay_values: dict[str, float] = {}
        self._names: list[tuple[str, Any, str | None]] = []
        self._group_keys: dict[int, list[str]] = {}

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.loggers:
            raise MisconfigurationException(
                "Cannot use `LearningRateMonitor` callback with `Trainer` that has no logger (logger=False). "
                "Enable a logger or remove the callback."
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
        if self.log_momentum and any(not _has_momentum(g) for _, opt, _ in self._names for g in opt.param_groups):
            rank_zero_warn(
                "You have set log_momentum=True, but some optimizers do not have momentum. This will log a value 0 "
                "for the momentum.",
                category=RuntimeWarning,
            )
        self._group_keys = {id(opt): _group_keys(name, opt) for name, opt, _ in self._names}
        self.lrs = {key: [] for keys in self._group_keys.values() for key in keys}
        self.last_momentum_values = {}
        self.last_weight_decay_values = {}

    def _keys_now(self, name: str, opt: Any) -> list[str]:
        """The optimizer's keys now; when its groups changed (a finetuning callback added one), each old key's
        history moves to the key that replaces it, at the end of ``lrs`` (Lightning's order)."""
        keys = _group_keys(name, opt)
        before = self._group_keys.get(id(opt), [])
        if keys != before:
            for i, old in enumerate(before):
                if old not in keys and old in self.lrs:
                    history = self.lrs.pop(old)
                    if i < len(keys) and keys[i] not in self.lrs:
                        self.lrs[keys[i]] = history
            for key in keys:
                self.lrs.setdefault(key, [])
            self._group_keys[id(opt)] = keys
        return keys

    def _stats(self, interval: str) -> dict[str, float]:
        stats: dict[str, float] = {}
        for name, opt, sched_interval in self._names:
            if self.logging_interval is None and sched_interval not in (None, interval):
                continue
            for key, group in zip(self._keys_now(name, opt), opt.param_groups):
                stats[key] = float(group["lr"])
                self.lrs[key].append(stats[key])
                if self.log_momentum:
                    momentum = group["betas"][0] if "betas" in group else group.get("momentum", 0.0)
                    stats[f"{key}-momentum"] = self.last_momentum_values[f"{key}-momentum"] = float(momentum)
                if self.log_weight_decay and "weight_decay" in group:
                    value = float(group["weight_decay"])
                    stats[f"{key}-weight_decay"] = self.last_weight_decay_values[f"{key}-weight_decay"] = value
        return stats

    def _log(self, trainer: Trainer, interval: str) -> None:
        stats = self._stats(interval)
        if not stats:
            return
        step = trainer.run_context.progress.batches_that_stepped
        for logger in trainer.loggers:
            logger.log_metrics(stats, step=step)
        # callbacks can monitor them (EarlyStopping(monitor="lr-SGD")), as in Lightning
        trainer.run_context.metrics.callback.update({k: torch.tensor(v) for k, v in stats.items()})

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        if self.logging_interval == "epoch" or not trainer.run_context.metrics.should_log_step():
            return
        self._log(trainer, "step")

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.logging_interval == "step":
            return
        self._log(trainer, "epoch")


def _has_momentum(group: dict[str, Any]) -> bool:
    return "betas" in group or "momentum" in group


def _group_keys(name: str, opt: Any) -> list[str]:
    """``lr-SGD`` for one unnamed group; ``lr-SGD/<group name>`` or ``lr-SGD/pg<i>`` per group otherwise."""
    groups = opt.param_groups
    names = [g.get("name") for g in groups]
    duplicated = sorted({n for n in names if n is not None and names.count(n) > 1})
    if duplicated:
        raise MisconfigurationException(
            f"A single `Optimizer` cannot have multiple parameter groups with identical `name` values: {name} has "
            f"duplicated parameter group names {duplicated}. Give each group its own name."
        )
    if len(groups) == 1 and names[0] is None:
        return [name]
    return [f"{name}/{n}" if n is not None else f"{name}/pg{i + 1}" for i, n in enumerate(names)]

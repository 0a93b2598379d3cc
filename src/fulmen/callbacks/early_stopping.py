"""``EarlyStopping``: stop training when a monitored metric stops improving."""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

import torch

from fulmen.core.hooks import Callback
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.migration.migration import holds_legacy_state
from fulmen.utilities.rank_zero import rank_prefixed_message as rank_prefixed_message
from fulmen.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

# where the callback says why it stops (a child of fulmen's logger); looked up when it logs, so patching
# `fulmen.callbacks.early_stopping.log` (or its `info`) sees the messages
log = logging.getLogger(__name__)


class EarlyStoppingReason(Enum):
    """Why an ``EarlyStopping`` stopped training (``callback.stopping_reason``); the sentence that says it
    is ``callback.stopping_reason_message``."""

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


@holds_legacy_state  # a pre-0.10 checkpoint's top-level keys hold its state
class EarlyStopping(Callback):
    """Sets ``trainer.should_stop`` after ``patience`` checks without an improvement of ``min_delta``.

    The check runs at the end of the training epoch (after that epoch's validation) when validation runs
    once per epoch, and after each validation run otherwise (``check_on_train_epoch_end`` overrides).
    ``min_epochs`` / ``min_steps`` of the Trainer still hold: a stop before them is deferred.
    """

    _is_monitoring_callback = True

    mode_dict = {"min": torch.lt, "max": torch.gt}

    order_dict = {"min": "<", "max": ">"}

    def __init__(
        self,
        monitor: str,
        min_delta: float = 0.0,
        patience: int = 3,
        verbose: bool = False,
        mode: str = "min",
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        log_rank_zero_only: bool = False,
    ) -> None:
        super().__init__()
        if mode not in self.mode_dict:
            raise MisconfigurationException(
                f"EarlyStopping(mode={mode!r}): `mode` can be {', '.join(self.mode_dict)}, got {mode}."
            )
        if not isinstance(patience, int) or patience < 0:
            raise MisconfigurationException(f"EarlyStopping(patience={patience!r}) must be an int >= 0.")
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.verbose = verbose
        self.strict = strict
        self.check_finite = check_finite
        self.stopping_threshold = stopping_threshold
        self.divergence_threshold = divergence_threshold
        self.log_rank_zero_only = log_rank_zero_only
        self._check_on_train_epoch_end = check_on_train_epoch_end
        # improvement means: current beats best by more than |min_delta|, in the mode's direction
        increasing = self.monitor_op == torch.gt
        self.min_delta = abs(min_delta) if increasing else -abs(min_delta)
        self.wait_count = 0
        self.stopped_epoch = 0
        self.best_score = torch.tensor(-torch.inf if increasing else torch.inf)
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None

    @property
    def monitor_op(self) -> Callable[..., Any]:
        """``torch.lt`` for ``mode="min"``, ``torch.gt`` for ``"max"``: whether a value beats another."""
        return self.mode_dict[self.mode]

    @property
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor, mode=self.mode)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._check_on_train_epoch_end is None:
            self._check_on_train_epoch_end = (
                trainer.val_check_interval == 1.0 and trainer.check_val_every_n_epoch == 1
            )

    # The check is split into Lightning's steps, under its names: subclasses override them (finetuning-scheduler's
    # FTSEarlyStopping replaces `_evaluate_stopping_criteria` to move to the next phase instead of stopping).
    def _should_skip_check(self, trainer: Trainer) -> bool:
        return trainer.state.fn is None or trainer.state.fn.value != "fit" or trainer.sanity_checking

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._check_on_train_epoch_end and not self._should_skip_check(trainer):
            self._run_early_stopping_check(trainer)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._check_on_train_epoch_end and not self._should_skip_check(trainer):
            self._run_early_stopping_check(trainer)

    def _validate_condition_metric(self, logs: dict[str, Any]) -> bool:
        """Whether the monitored key was logged (if not: an error when ``strict``, else a warning when verbose)."""
        if self.monitor in logs:
            return True
        message = (
            f"EarlyStopping(monitor={self.monitor!r}) found no logged metric of that name. Log it with "
            f"self.log({self.monitor!r}, value), or monitor one of: {sorted(logs)}."
        )
        if self.strict:
            raise RuntimeError(message)
        if self.verbose:
            rank_zero_warn(message, category=RuntimeWarning)
        return False

    def _run_early_stopping_check(self, trainer: Trainer) -> None:
        """Read the monitored value, decide, and stop every process if any one decided to stop."""
        metrics = trainer.callback_metrics
        if trainer.fast_dev_run or not self._validate_condition_metric(metrics):
            return
        current = torch.as_tensor(metrics[self.monitor]).detach().squeeze().cpu()  # sync: read once per check
        stop_here, reason = self._evaluate_stopping_criteria(current)
        should_stop = trainer.strategy.reduce_boolean_decision(stop_here, all=False)
        trainer.should_stop = trainer.should_stop or should_stop
        if should_stop:
            self.stopped_epoch = trainer.current_epoch
            # another rank's check may have decided it: this rank keeps its own reason, if it has one
            self.stopping_reason_message = reason if stop_here else None
        if reason and self.verbose:
            self._log_info(trainer, reason, self.log_rank_zero_only)

    @staticmethod
    def _log_info(trainer: Trainer | None, message: str, log_rank_zero_only: bool) -> None:
        """``message`` to ``log.info``: with several processes prefixed by this rank (``[rank: 1] ...``), and
        on rank zero only when ``log_rank_zero_only``."""
        rank = trainer.global_rank if trainer is not None and trainer.world_size > 1 else None
        if rank is None or rank == 0 or not log_rank_zero_only:
            log.info(rank_prefixed_message(message, rank))

    def _evaluate_stopping_criteria(self, current: torch.Tensor) -> tuple[bool, str | None]:
        """Whether to stop, and the sentence to print (``stopping_reason`` says why when it stops)."""
        best = self.best_score
        if self.check_finite and not torch.isfinite(current):
            self.stopping_reason = EarlyStoppingReason.NON_FINITE_METRIC
            return True, f"{self.monitor}={current.item()} is not finite (best so far {best.item():.4g}): stopping."
        if self.stopping_threshold is not None and self.monitor_op(current, self.stopping_threshold):
            self.stopping_reason = EarlyStoppingReason.STOPPING_THRESHOLD
            return True, (
                f"{self.monitor}={current.item():.4g} {self.order_dict[self.mode]} "
                f"stopping_threshold={self.stopping_threshold}: Stopping threshold reached, stopping."
            )
        if self.divergence_threshold is not None and self.monitor_op(-current, -self.divergence_threshold):
            self.stopping_reason = EarlyStoppingReason.DIVERGENCE_THRESHOLD
            return True, (
                f"{self.monitor}={current.item():.4g} passed divergence_threshold={self.divergence_threshold}: "
                "Divergence threshold reached, stopping."
            )
        if self.monitor_op(current - self.min_delta, best.to(current.device)):
            reason = self._improvement_message(current)
            self.best_score = current
            self.wait_count = 0
            return False, reason
        self.wait_count += 1
        if self.wait_count >= self.patience:
            self.stopping_reason = EarlyStoppingReason.PATIENCE_EXHAUSTED
            return True, (
                f"{self.monitor} did not improve in the last {self.wait_count} checks (best {best.item():.4g}): stopping."
            )
        return False, None

    def _improvement_message(self, current: torch.Tensor) -> str:
        best = self.best_score
        if torch.isfinite(best):
            return f"{self.monitor} improved by {abs(best - current).item():.4g} >= min_delta={abs(self.min_delta)}: new best {current.item():.4g}."
        return f"{self.monitor} improved: new best {current.item():.4g}."

    def state_dict(self) -> dict[str, Any]:
        return {
            "wait_count": self.wait_count,
            "stopped_epoch": self.stopped_epoch,
            "best_score": self.best_score,
            "patience": self.patience,
            "stopping_reason": self.stopping_reason.value,
            "stopping_reason_message": self.stopping_reason_message,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wait_count = state_dict["wait_count"]
        self.stopped_epoch = state_dict["stopped_epoch"]
        self.best_score = state_dict["best_score"]
        self.patience = state_dict["patience"]
        reason = state_dict.get("stopping_reason", EarlyStoppingReason.NOT_STOPPED)  # absent in older files
        self.stopping_reason = reason if isinstance(reason, EarlyStoppingReason) else EarlyStoppingReason(reason)
        self.stopping_reason_message = state_dict.get("stopping_reason_message")

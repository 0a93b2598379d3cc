"""``GradientAccumulationScheduler``: change how many batches are accumulated per optimizer step as training
goes on, by epoch or by global step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.core.hooks import Callback
from fulmen.utilities.exceptions import InvalidIndexError, InvalidTypeError, MisconfigurationException
from fulmen.utilities.model_helpers import is_overridden
from fulmen.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

_MODES = ("epoch", "step")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class GradientAccumulationScheduler(Callback):
    """Set ``trainer.accumulate_grad_batches`` from a schedule ``{threshold: factor}``.

    ``mode="epoch"``: thresholds are zero-indexed epochs; an epoch uses the factor of the largest threshold
    at or below it. ``mode="step"``: thresholds are global steps (optimizer steps). An accumulation window
    takes its factor when it opens (its first batch, from the current ``global_step``) and keeps it until
    it closes; the last batch of an epoch always closes it. Every batch's loss is divided by the factor of
    its window. A schedule whose smallest threshold is above 0 starts with factor 1.

    Example: ``GradientAccumulationScheduler({0: 8, 1000: 4, 5000: 1}, mode="step")`` steps the optimizer
    every 8 batches for the first 1000 steps, then every 4 until step 5000, then every batch.

    Raises:
        TypeError: ``scheduling`` is empty, or a key or value is not an int (also a MisconfigurationException).
        IndexError: the smallest threshold is negative (also a MisconfigurationException).
        MisconfigurationException: ``mode`` is not 'epoch' or 'step', or a factor is below 1.
    """

    def __init__(self, scheduling: dict[int, int], mode: str = "epoch") -> None:
        super().__init__()
        if not isinstance(scheduling, dict) or not scheduling:
            raise TypeError(
                f"GradientAccumulationScheduler(scheduling={scheduling!r}): pass a non-empty dict "
                "{threshold: accumulation_factor}, e.g. {0: 8, 4: 2}."
            )
        bad_keys = [k for k in scheduling if not _is_int(k)]
        if bad_keys:
            raise InvalidTypeError(
                f"GradientAccumulationScheduler(scheduling=...): Epoch should be an int (a threshold: an epoch or a "
                f"step); got {bad_keys!r}."
            )
        bad = {k: v for k, v in scheduling.items() if not _is_int(v)}
        if bad:
            raise InvalidTypeError(
                f"GradientAccumulationScheduler(scheduling=...): Accumulation factor should be an int; got {bad!r}."
            )
        if mode not in _MODES:
            raise MisconfigurationException(
                f"GradientAccumulationScheduler(mode={mode!r}) is not supported. Use 'epoch' (thresholds are "
                "epochs) or 'step' (thresholds are global steps)."
            )
        low = {k: v for k, v in scheduling.items() if v < 1}
        if low:
            raise MisconfigurationException(
                f"GradientAccumulationScheduler(scheduling=...): Accumulation factor should be an int >= 1; got {low!r}."
            )
        smallest = min(scheduling)
        if smallest < 0:
            raise InvalidIndexError(
                f"GradientAccumulationScheduler(scheduling=...): Epoch should be an int >= 0 (thresholds start at 0: "
                f"{mode}s are zero-indexed); got {smallest}."
            )
        schedule = dict(scheduling)
        if smallest > 0:
            schedule[0] = 1  # until the first threshold: no accumulation
        self.mode = mode
        self._set_schedule(schedule)

    def _set_schedule(self, schedule: dict[int, int]) -> None:
        self.scheduling = dict(sorted(schedule.items()))
        self.epochs = list(self.scheduling)  # the thresholds (Lightning's attribute name)

    def going_to_accumulate_grad_batches(self) -> bool:
        return any(v > 1 for v in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        """The factor at ``epoch`` (an epoch, or with ``mode="step"`` a global step)."""
        factor = 1
        for threshold in self.epochs:
            if threshold > epoch:
                break
            factor = self.scheduling[threshold]
        return factor

    # -- hooks ----------------------------------------------------------------------------------------
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not pl_module.automatic_optimization:
            raise RuntimeError(
                "Automatic gradient accumulation and the `GradientAccumulationScheduler` need automatic optimization, but "
                f"{type(pl_module).__name__} sets `automatic_optimization = False`. Remove the callback and "
                "accumulate in training_step, or switch to automatic optimization."
            )
        configured = trainer.config.accumulate_grad_batches
        if configured != 1:
            raise ValueError(
                f"You have set `accumulate_grad_batches` and are using the `GradientAccumulationScheduler` callback "
                f"(Trainer(accumulate_grad_batches={configured})): both set the accumulation factor. Remove "
                "`accumulate_grad_batches` from the Trainer (the schedule decides) or remove the callback."
            )
        if self.going_to_accumulate_grad_batches() and (
            is_overridden("optimizer_step", pl_module) or is_overridden("optimizer_zero_grad", pl_module)
        ):
            rank_zero_warn(
                "With gradient accumulation, your optimizer_step / optimizer_zero_grad overrides run once per "
                "accumulation window (when the optimizer steps): the hooks will not be called on every batch."
            )

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.mode == "epoch":
            trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.current_epoch)

    def on_train_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # a window's factor is fixed while it is open: only the batch that opens one reads the schedule
        if self.mode == "step" and not trainer.fit_loop.epoch_loop.accumulation_window_open:
            trainer.accumulate_grad_batches = self.get_accumulate_grad_batches(trainer.global_step)

    # -- checkpoints ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"scheduling": dict(self.scheduling), "mode": self.mode}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        schedule = {int(k): int(v) for k, v in state_dict.get("scheduling", self.scheduling).items()}
        mode = state_dict.get("mode", self.mode)
        if schedule != self.scheduling or mode != self.mode:
            rank_zero_warn(
                f"GradientAccumulationScheduler: resuming with the checkpoint's schedule {schedule} "
                f"(mode={mode!r}) instead of {self.scheduling} (mode={self.mode!r}), so that the run "
                "continues as it started."
            )
        self.mode = mode
        self._set_schedule(schedule)

"""One training epoch: batches, optimization, scheduler steps, validation checks, step logging."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from fulmen.loops.fetcher import PrefetchIterator
from fulmen.loops.optimization import AutomaticOptimization, ManualOptimization
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import WarningCache

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer


class TrainingEpochLoop:
    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.automatic = AutomaticOptimization(trainer)
        self.manual = ManualOptimization(trainer)
        self._is_last_batch = False
        self._warnings = WarningCache()
        self.scheduler_steps = [0, 0]  # scheduler updates: in the run, in the running epoch
        # The accumulation window: its size is read from trainer.accumulate_grad_batches when it opens (its
        # first batch) and stays fixed until it closes (its last batch, or the epoch's last batch).
        self.window_size = 1
        self.window_pos = 0  # batches of the open window run so far, the current one included
        self.window_done = True  # the current batch closed its window (an optimizer step follows it)
        self.outputs: list[Any] = []  # every batch's output, kept only for a training_epoch_end override
        self._collect_outputs = False
        self._batch_hooks = True

    @property
    def is_last_batch(self) -> bool:
        return self._is_last_batch

    # -- stop conditions -------------------------------------------------------------------------------
    def num_ready_batches_reached(self) -> bool:
        trainer = self.trainer
        return trainer._progress.batch_idx == trainer.num_training_batches or self._is_last_batch

    def done(self) -> bool:
        trainer = self.trainer
        progress = trainer._progress
        max_steps = trainer._loop_config.max_steps
        if max_steps != -1 and progress.global_step >= max_steps:
            return True
        if progress.batch_idx == trainer.num_training_batches or self._is_last_batch:  # all batches ran
            return True
        if trainer._stopping:
            if trainer.fit_loop.can_stop_early:
                return True
            cfg = trainer._loop_config
            self._warnings.info(
                f"should_stop was set, but min_epochs={cfg.min_epochs} / min_steps={cfg.min_steps} is not met "
                "yet: training continues."
            )
        return False

    @property
    def accumulation_window_open(self) -> bool:
        """During a batch: it only accumulates (no optimizer step after it). Between batches: the next
        batch continues the open window, whose factor is fixed."""
        return not self.window_done

    def should_accumulate(self) -> bool:
        return self.accumulation_window_open

    def _advance_window(self) -> None:
        if self.window_done:
            self.window_size = self.trainer.accumulate_grad_batches
            self.window_pos = 0
        self.window_pos += 1
        self.window_done = self.window_pos >= self.window_size or self.num_ready_batches_reached()

    def window_state(self, before_current_batch: bool = False) -> list[Any]:
        """``[pos, size, done]`` for checkpoints; ``before_current_batch`` undoes the running batch."""
        if before_current_batch:
            if self.window_pos <= 1:
                return [0, self.window_size, True]
            return [self.window_pos - 1, self.window_size, False]
        return [self.window_pos, self.window_size, self.window_done]

    def load_window_state(self, state: list[Any] | None, batch_idx: int) -> None:
        if state is None:  # a Lightning checkpoint: windows of accumulate_grad_batches from the epoch start
            size = self.trainer.accumulate_grad_batches
            pos = batch_idx % size
            state = [pos, size, pos == 0]
        self.window_pos, self.window_size, self.window_done = int(state[0]), int(state[1]), bool(state[2])

    def reset_epoch(self) -> None:
        self._is_last_batch = False
        self.window_done = True
        self.window_pos = 0
        self.outputs = []

    def plan(self) -> None:
        """Read once per epoch (fresh or resumed): with no batch-start/end hook anywhere the hot loop skips
        their dispatch, and default step hooks run inline."""
        hooks = self.trainer._hooks
        self._collect_outputs = hooks.module_overrides("training_epoch_end")
        self._batch_hooks = not hooks.defaults_only("on_train_batch_start", "on_train_batch_end")
        self.automatic.plan()

    # -- run -------------------------------------------------------------------------------------------
    def run(self, batches: PrefetchIterator, finish_batch: bool | None = None, resumed: bool = False) -> None:
        """Run the epoch's batches. ``resumed``: continue an epoch restored from a checkpoint, where
        ``finish_batch`` says whether the batch the checkpoint was written in still has to end (``True``:
        with its pending validation run, ``False``: without, ``None``: it had ended)."""
        trainer = self.trainer
        progress = trainer._progress
        fit = trainer.fit_loop
        self.plan()
        if not resumed:
            self.reset_epoch()
        elif finish_batch is not None:
            self.on_advance_end(run_validation=finish_batch)
            if self.done():
                return
        if batches.done:
            return
        while True:
            fit.phase = "between"
            trainer._stop_agreed = False  # a should_stop set from here on waits for the next agreement
            try:
                batch, self._is_last_batch = next(batches)
            except StopIteration:
                self._is_last_batch = True
                break
            if self.advance(batch) == -1:
                progress.batch_idx += 1
                break
            self.on_advance_end()
            if trainer._signals.received is not None:
                trainer._signals.stop()
            if self.done():
                break

    def advance(self, batch: Any) -> int | None:
        trainer = self.trainer
        progress = trainer._progress
        hooks = trainer._hooks
        batch_idx = progress.batch_idx
        batch = trainer.strategy.batch_to_device(batch)
        trainer._results.set_batch(batch)  # type: ignore[union-attr]
        if self._batch_hooks:
            hooks.call_callbacks("on_train_batch_start", batch, batch_idx)
            if hooks.call_module("on_train_batch_start", batch, batch_idx) == -1:
                return -1
        progress.batch_idx += 1  # batches taken this epoch, this one included
        fit = trainer.fit_loop
        fit.phase = "step"
        module = trainer.lightning_module
        assert module is not None
        self._advance_window()
        accumulate = not self.window_done
        if module.automatic_optimization:
            outputs = self.automatic.run(batch, batch_idx, accumulate, self.window_pos == 1, self.window_size)
        else:
            outputs = self.manual.run(batch, batch_idx)
        if self._collect_outputs:
            self.outputs.append(outputs)
        fit.phase = "batch"
        if trainer.lr_scheduler_configs:
            self.update_lr_schedulers("step", plateau=False)
            if self.num_ready_batches_reached():
                self.update_lr_schedulers("epoch", plateau=False)
        if self._batch_hooks:
            hooks.call_callbacks("on_train_batch_end", outputs, batch, batch_idx)
            hooks.call_module("on_train_batch_end", outputs, batch, batch_idx)
        results = fit.results
        if results.items and not (accumulate and module.automatic_optimization):
            trainer._metrics.on_train_step_end(results)
        return None

    def on_advance_end(self, run_validation: bool | None = None) -> None:
        trainer = self.trainer
        progress = trainer._progress
        if run_validation is None:
            run_validation = self._should_check_val()
        if run_validation:
            trainer.fit_loop.phase = "validation"
            trainer._run_validation_in_fit()
            trainer._agree_to_stop()
        if trainer.lr_scheduler_configs:
            self.update_lr_schedulers("step", plateau=True)
        module = trainer.lightning_module
        if self.window_done or module is None or not module.automatic_optimization:
            progress.batches_that_stepped += 1
        progress.total_batch_idx += 1

    def epoch_end_outputs(self) -> list[Any]:
        """``training_epoch_end``'s argument: every batch's output, or one such list per optimizer when
        several optimizers run under automatic optimization (only the batches each one ran on)."""
        trainer = self.trainer
        module = trainer.lightning_module
        n = len(trainer.optimizers)
        if n > 1 and module is not None and module.automatic_optimization:
            return [[out[i] for out in self.outputs if out[i]] for i in range(n)]
        return [out for out in self.outputs if out]

    # -- validation schedule ---------------------------------------------------------------------------
    def _should_check_val(self) -> bool:
        trainer = self.trainer
        every = trainer._loop_config.check_val_every_n_epoch
        if every is not None and (trainer._progress.current_epoch + 1) % every != 0:
            return False
        val_check_batch = trainer.val_check_batch
        if (self._is_last_batch and val_check_batch == math.inf) or (
            trainer._stopping and trainer.fit_loop.can_stop_early
        ):
            due = True
        elif val_check_batch == math.inf:
            due = False  # not the last batch
        else:
            progress = trainer._progress
            index = progress.total_batch_idx if every is None else progress.batch_idx - 1
            due = (index + 1) % int(val_check_batch) == 0
        # the schedule first: whether validation is enabled at all is the costlier question
        return due and trainer._data.validation_enabled()

    # -- learning-rate schedulers ----------------------------------------------------------------------
    def update_lr_schedulers(self, interval: str, plateau: bool) -> None:
        trainer = self.trainer
        configs = trainer.lr_scheduler_configs
        if not configs:
            return
        module = trainer.lightning_module
        if module is None or not module.automatic_optimization:
            return
        if interval == "step" and self.should_accumulate():
            return
        progress = trainer._progress
        index = (progress.batch_idx - 1 if interval == "step" else trainer.current_epoch) + 1
        # with optimizer frequencies, a 'step' scheduler steps only on batches its optimizer ran on
        active = self.automatic.active if interval == "step" and trainer.optimizer_frequencies else None
        skipped = trainer.precision_plugin.step_was_skipped
        for config in configs:
            if config.reduce_on_plateau != plateau or config.interval != interval:
                continue
            if active is not None and config.opt_idx is not None and config.opt_idx not in active:
                continue
            if interval == "step" and skipped(trainer.optimizers[config.opt_idx or 0]):
                continue  # the gradient scaler skipped this optimizer's step: its schedule waits too
            if index % config.frequency != 0:
                continue
            metric = None
            if config.reduce_on_plateau:
                metric = trainer.callback_metrics.get(config.monitor) if config.monitor else None
                if metric is None:
                    if config.strict:
                        raise MisconfigurationException(
                            f"The ReduceLROnPlateau scheduler monitors {config.monitor!r}, which was not logged. "
                            f"Logged metrics: {sorted(trainer.callback_metrics)}. Log it with self.log("
                            f"{config.monitor!r}, ...) or change the scheduler's 'monitor'."
                        )
                    self._warnings.warn(
                        f"ReduceLROnPlateau monitors {config.monitor!r}, which is not available; the scheduler "
                        "is not stepped (strict=False)."
                    )
                    continue
            trainer._hooks.call_module_idx(
                "lr_scheduler_step", functools.partial(int, config.opt_idx or 0), config.scheduler, metric
            )
            self.scheduler_steps[0] += 1
            self.scheduler_steps[1] += 1

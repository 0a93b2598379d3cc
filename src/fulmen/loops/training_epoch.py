"""One training epoch: batches, optimization, scheduler steps, validation checks, step logging."""

from __future__ import annotations

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

    @property
    def is_last_batch(self) -> bool:
        return self._is_last_batch

    # -- stop conditions -------------------------------------------------------------------------------
    def num_ready_batches_reached(self) -> bool:
        trainer = self.trainer
        return trainer._progress.batch_idx == trainer.num_training_batches or self._is_last_batch

    def _max_steps_reached(self) -> bool:
        max_steps = self.trainer.max_steps
        return max_steps != -1 and self.trainer._progress.global_step >= max_steps

    def done(self) -> bool:
        if self._max_steps_reached() or self.num_ready_batches_reached():
            return True
        trainer = self.trainer
        if trainer.should_stop:
            if trainer.fit_loop.can_stop_early:
                return True
            cfg = trainer._loop_config
            self._warnings.info(
                f"should_stop was set, but min_epochs={cfg.min_epochs} / min_steps={cfg.min_steps} is not met "
                "yet: training continues."
            )
        return False

    def should_accumulate(self) -> bool:
        """True if this batch only accumulates gradients (no optimizer step after it)."""
        trainer = self.trainer
        done_window = trainer._progress.batch_idx % trainer.accumulate_grad_batches == 0
        return not done_window and not self.num_ready_batches_reached()

    # -- run -------------------------------------------------------------------------------------------
    def run(self, batches: PrefetchIterator, finish_batch: bool | None = None) -> None:
        """Run the epoch's batches. Resuming, ``finish_batch`` says whether the batch the checkpoint was
        written in still has to end (``True``: with its pending validation run, ``False``: without)."""
        trainer = self.trainer
        progress = trainer._progress
        fit = trainer.fit_loop
        if finish_batch is not None:
            self.on_advance_end(run_validation=finish_batch)
            if self.done():
                return
        else:
            self._is_last_batch = False
        if batches.done:
            return
        while True:
            fit.phase = "between"
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
        hooks.call_callbacks("on_train_batch_start", batch, batch_idx)
        response = hooks.call_module("on_train_batch_start", batch, batch_idx)
        if response == -1:
            return -1
        progress.batch_idx += 1  # batches taken this epoch, this one included
        fit = trainer.fit_loop
        fit.phase = "step"
        module = trainer.lightning_module
        assert module is not None
        accumulate = self.should_accumulate()
        if module.automatic_optimization:
            outputs = self.automatic.run(trainer.optimizers[0], batch, batch_idx, accumulate)
        else:
            outputs = self.manual.run(batch, batch_idx)
        fit.phase = "batch"
        self.update_lr_schedulers("step", plateau=False)
        if self.num_ready_batches_reached():
            self.update_lr_schedulers("epoch", plateau=False)
        hooks.call_callbacks("on_train_batch_end", outputs, batch, batch_idx)
        hooks.call_module("on_train_batch_end", outputs, batch, batch_idx)
        if not (accumulate and module.automatic_optimization):
            trainer._metrics.on_train_step_end(trainer.fit_loop.results)
        return None

    def on_advance_end(self, run_validation: bool | None = None) -> None:
        trainer = self.trainer
        progress = trainer._progress
        if run_validation is None:
            run_validation = self._should_check_val()
        if run_validation:
            trainer.fit_loop.phase = "validation"
            trainer._run_validation_in_fit()
        self.update_lr_schedulers("step", plateau=True)
        module = trainer.lightning_module
        if not (self.should_accumulate() and module is not None and module.automatic_optimization):
            progress.batches_that_stepped += 1
        progress.total_batch_idx += 1

    # -- validation schedule ---------------------------------------------------------------------------
    def _should_check_val(self) -> bool:
        trainer = self.trainer
        cfg = trainer._loop_config
        if not trainer._data.validation_enabled():
            return False
        every = cfg.check_val_every_n_epoch
        if every is not None and (trainer.current_epoch + 1) % every != 0:
            return False
        val_check_batch = trainer.val_check_batch
        if self._is_last_batch and val_check_batch == float("inf"):
            return True
        if trainer.should_stop and trainer.fit_loop.can_stop_early:
            return True
        if val_check_batch == float("inf"):
            return self._is_last_batch
        progress = trainer._progress
        index = progress.total_batch_idx if every is None else progress.batch_idx - 1
        return (index + 1) % int(val_check_batch) == 0

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
        for config in configs:
            if config.reduce_on_plateau != plateau or config.interval != interval:
                continue
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
            trainer._hooks.call_module("lr_scheduler_step", config.scheduler, metric)
            self.scheduler_steps[0] += 1
            self.scheduler_steps[1] += 1

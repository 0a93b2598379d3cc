"""One training epoch: batches, optimization, scheduler steps, validation checks, step logging."""

from __future__ import annotations

import datetime
import functools
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fulmen.loops.evaluation_loop import EvaluationLoop, ValidationInterrupted
from fulmen.loops.fetchers import PrefetchIterator
from fulmen.loops.optimization import AutomaticOptimization, ManualOptimization
from fulmen.loops.progress import Progress, progress_view
from fulmen.runtime.rng import capture_rng, restore_rng
from fulmen.runtime.state import LoopPhase
from fulmen.runtime.state import RunningStage as RunningStage
from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.strategies.strategy import Strategy
from fulmen.utilities.exceptions import MisconfigurationException, ZeroIntervalError
from fulmen.utilities.exceptions import SIGTERMException as SIGTERMException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import is_overridden
from fulmen.utilities.rank_zero import WarningCache
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning as PossibleUserWarning

if TYPE_CHECKING:
    from fulmen.runtime.context import RunContext
    from fulmen.runtime.results import ResultCollection


# the phases the hot loop writes per batch, as module constants (a global read, not an enum attribute lookup)
_BETWEEN, _STEP, _BATCH = LoopPhase.BETWEEN, LoopPhase.STEP, LoopPhase.BATCH


def max_steps_reached(global_step: int, max_steps: int) -> bool:
    return max_steps != -1 and global_step >= max_steps


def can_stop_early(context: RunContext) -> bool:
    """should_stop is honoured only once min_epochs and min_steps are met."""
    config, progress = context.config, context.progress
    met_epochs = config.min_epochs is None or progress.current_epoch >= config.min_epochs
    met_steps = config.min_steps is None or progress.global_step >= config.min_steps
    return met_epochs and met_steps


class TrainingEpochLoop:
    """Runs the batches of one epoch. ``run_validation`` (the fit loop's) runs a validation inside it."""

    def __init__(
        self, context: RunContext, results: ResultCollection, run_validation: Callable[[], None],
        val_loop: EvaluationLoop,
    ) -> None:  # fmt: skip
        self.context = context
        self._val_loop = val_loop
        self.results = results  # the fit loop's: what self.log writes to while training
        self._run_validation = run_validation
        self._last_val_time: float | None = None  # time-based val_check_interval: when validation last ran
        self.automatic = AutomaticOptimization(context)
        self.manual = ManualOptimization(context)
        self._is_last_batch = False
        self._warnings = WarningCache()
        self.outputs: list[Any] = []  # every batch's output, kept only for a training_epoch_end override
        # decided once per epoch by plan(): what the hot loop may skip
        self._collect_outputs = False
        self._batch_hooks = True
        self._strategy_batch_start = False  # the strategy overrides on_train_batch_start
        self._automatic = True
        self._plain_steps = False  # this epoch's batches run straight through (AutomaticOptimization.plain_steps)
        self._validates = True  # validation can run in this fit at all (else no per-batch schedule check)
        self.validation_interrupted = False  # a signal stopped this batch's validation: it is still to run

    # -- Lightning's loop state, as views of fulmen's (read by callbacks and libraries) --------------------------
    @property
    def batch_progress(self) -> Progress:
        """Batches: ``current`` (this epoch) / ``total`` counts and ``is_last_batch``."""
        return progress_view(self.context.progress, lambda: self._is_last_batch, "batch_progress")

    @property
    def scheduler_progress(self) -> Progress:
        return progress_view(self.context.progress, lambda: self._is_last_batch, "scheduler_progress")

    @property
    def batch_idx(self) -> int:
        """The index of the running (or last) batch in this epoch: batches made ready, less one."""
        return int(self.batch_progress.current.ready) - 1

    @property
    def total_batch_idx(self) -> int:
        """The same across the run's epochs."""
        return int(self.batch_progress.total.ready) - 1

    @property
    def val_loop(self) -> EvaluationLoop:
        """The loop that runs validation inside the fit (its ``batch_progress`` counts the running validation)."""
        return self._val_loop

    @property
    def global_step(self) -> int:
        """Optimizer steps taken in the run (``trainer.global_step``)."""
        return self.context.progress.global_step

    @property
    def automatic_optimization(self) -> AutomaticOptimization:
        return self.automatic

    @property
    def manual_optimization(self) -> ManualOptimization:
        return self.manual

    @property
    def is_last_batch(self) -> bool:
        return self._is_last_batch

    @is_last_batch.setter
    def is_last_batch(self, value: bool) -> None:
        self._is_last_batch = value

    @property
    def step_flags(self) -> dict[str, bool]:
        """What this epoch's plan (``plan``) let the hot loop skip, read-only: whether batch hooks are
        dispatched, outputs kept for ``training_epoch_end``, the strategy's ``on_train_batch_start`` called,
        and whether batches run straight through (``AutomaticOptimization.plain_steps``)."""
        return {
            "batch_hooks": self._batch_hooks, "collect_outputs": self._collect_outputs,
            "strategy_batch_start": self._strategy_batch_start, "plain_steps": self._plain_steps,
        }  # fmt: skip

    # -- stop conditions -------------------------------------------------------------------------------
    def num_ready_batches_reached(self) -> bool:
        return self.context.progress.batch_idx == self.context.batches.train or self._is_last_batch

    def done(self) -> bool:
        context = self.context
        progress = context.progress
        max_steps = context.config.max_steps
        if max_steps != -1 and progress.global_step >= max_steps:  # max_steps_reached, inline: read per batch
            return True
        if progress.batch_idx == context.batches.train or self._is_last_batch:  # all batches ran
            return True
        if context.stop.should_stop and context.stopping:
            if can_stop_early(context):
                return True
            config = context.config
            self._warnings.info(
                f"`trainer.should_stop` was set, but `min_epochs={config.min_epochs}` or `min_steps={config.min_steps}` "
                "has not been met. Training will continue until both are."
            )
        return False

    # -- the accumulation window -------------------------------------------------------------------------
    @property
    def accumulation_window_open(self) -> bool:
        """During a batch: it only accumulates (no optimizer step after it). Between batches: the next
        batch continues the open window, whose factor is fixed."""
        return not self.context.progress.window.done

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue an epoch a checkpoint was written in (its accumulation window is the progress's)."""
        self.reset_epoch()
        self._is_last_batch = bool(state["is_last_batch"])

    def restore_window(self, state: list[Any] | None, batch_idx: int) -> None:
        """The accumulation window a checkpoint written ``batch_idx`` batches into the epoch was in (``state``,
        ``AccumulationWindow.load``'s form); a Lightning checkpoint has none: its windows are runs of
        ``accumulate_grad_batches`` from the epoch start."""
        if state is None:
            size = self.context.accumulate_grad_batches
            pos = batch_idx % size
            state = [pos, size, pos == 0]
        self.context.progress.window.load(state)

    def reset_epoch(self) -> None:
        window = self.context.progress.window
        self._is_last_batch = False
        self.validation_interrupted = False
        window.done, window.pos = True, 0
        self.outputs = []

    def plan(self) -> None:
        """Read once per epoch (fresh or resumed): with no batch-start/end hook anywhere the hot loop skips
        their dispatch, and default step hooks run inline."""
        hooks = self.context.hooks
        module = self.context.module
        assert module is not None
        self._automatic = module.automatic_optimization
        self._collect_outputs = hooks.module_overrides("training_epoch_end")
        self._batch_hooks = not hooks.defaults_only("on_train_batch_start", "on_train_batch_end")
        strategy = self.context.strategy
        self._strategy_batch_start = is_overridden("on_train_batch_start", strategy, Strategy)
        # Lightning calls the strategy's (deprecated) post_training_step after every training_step
        self.automatic.post_step = self.manual.post_step = is_overridden("post_training_step", strategy, Strategy)
        self._validates = self.context.data.validation_enabled(load=False)
        self.automatic.plan()
        self.automatic.outputs_unread = not (self._batch_hooks or self._collect_outputs)
        self._plain_steps = self._automatic and self.automatic.plain_steps()
        self.manual.count_steps(manual=not self._automatic)

    # -- run -------------------------------------------------------------------------------------------
    def run(self, batches: PrefetchIterator, finish_batch: bool | None = None, resumed: bool = False) -> None:
        """Run the epoch's batches. ``resumed``: continue an epoch restored from a checkpoint, where
        ``finish_batch`` says whether the batch the checkpoint was written in still has to end (``True``:
        with its pending validation run, ``False``: without, ``None``: it had ended)."""
        progress, stop = self.context.progress, self.context.stop
        self.plan()
        if not resumed:
            self.reset_epoch()
        elif finish_batch is not None:
            self.on_advance_end(run_validation=finish_batch)
            if self.done():
                return
        if batches.done:
            return
        advance = self.context.hooks.profiled("run_training_batch", self.advance)  # advance itself unprofiled
        check_saves = self.context.strategy.failed_save_check()  # None: the writer saves before returning
        while True:
            progress.phase = _BETWEEN
            stop.agreed = False  # a should_stop set from here on waits for the next agreement
            try:
                batch, self._is_last_batch = next(batches)
            except StopIteration:
                self._is_last_batch = True
                break
            if advance(batch) == -1:
                break
            self.on_advance_end()
            if check_saves is not None:
                check_saves()  # a checkpoint that failed to write in the background stops the run here
            # a signal is acted on once the optimizer step is complete (the end of an accumulation window,
            # at most accumulate_grad_batches - 1 batches later): the checkpoint then holds no partial
            # gradients, so it resumes on any number of processes (an elastic restart)
            if stop.signal is not None and (progress.window.done or not self._automatic):
                stop.on_signal()  # saves a checkpoint at this batch boundary and unwinds the run
            if self.done():
                break

    def advance(self, batch: Any) -> int | None:
        context = self.context
        progress, hooks = context.progress, context.hooks
        batch_idx = progress.batch_idx
        batch = context.strategy.batch_to_device(batch)
        results = self.results
        results.set_batch(batch)
        if self._batch_hooks:
            hooks.call_callbacks("on_train_batch_start", batch, batch_idx)
            response = hooks.call_module("on_train_batch_start", batch, batch_idx)
            if self._strategy_batch_start:
                context.strategy.on_train_batch_start(batch, batch_idx)
            if response == -1:
                self._skip_rest_of_epoch()
                return -1
        elif self._strategy_batch_start:
            context.strategy.on_train_batch_start(batch, batch_idx)
        progress.batch_idx += 1  # batches taken this epoch, this one included
        progress.phase = _STEP
        window = progress.window  # the accumulation window, advanced inline (once per batch)
        if window.done:
            window.size = context.accumulate_grad_batches
            window.pos = 0
            if not window.size:  # accumulate_grad_batches=0, which the Trainer takes (as Lightning does)
                raise ZeroIntervalError(
                    "accumulate_grad_batches=0: an optimizer step would come every 0 batches. Use an int >= 1 "
                    "(the batches whose gradients are summed before each optimizer step)."
                )
        window.pos += 1
        window.done = window.pos >= window.size or progress.batch_idx == context.batches.train or self._is_last_batch
        accumulate = not window.done
        if self._plain_steps:  # the batch straight through: see AutomaticOptimization.plain_steps
            self.automatic.run_plain(batch, batch_idx)
            outputs = None
        elif self._automatic:
            outputs = self.automatic.run(batch, batch_idx, accumulate, window.pos == 1, window.size)
        else:
            outputs = self.manual.run(batch, batch_idx)
        if self._collect_outputs:
            self.outputs.append(outputs)
        progress.phase = _BATCH
        if context.strategy.lr_scheduler_configs:
            self.update_lr_schedulers("step", plateau=False)
            if self.num_ready_batches_reached():
                self.update_lr_schedulers("epoch", plateau=False)
        if self._batch_hooks:
            hooks.call_callbacks("on_train_batch_end", outputs, batch, batch_idx)
            hooks.call_module("on_train_batch_end", outputs, batch, batch_idx)
        if results.items and not (accumulate and self._automatic):
            context.metrics.on_train_step_end(results)
        results.clear_batch()
        return None

    def _skip_rest_of_epoch(self) -> None:
        """``on_train_batch_start`` returned -1: this batch is the epoch's last, untrained. Its schedulers still
        step as at any last batch: 'step' ones (no accumulation is left open at an epoch's end) and 'epoch' ones,
        so a schedule over epochs keeps its pace when a module skips the end of some epochs."""
        self.context.progress.batch_idx += 1  # taken (it counts in the epoch's batches), not trained
        self._is_last_batch = True
        if self.context.strategy.lr_scheduler_configs:
            self.update_lr_schedulers("step", plateau=False, last_batch=True)
            self.update_lr_schedulers("epoch", plateau=False)

    def on_advance_end(self, run_validation: bool | None = None) -> None:
        context = self.context
        progress = context.progress
        if run_validation is None:
            run_validation = self._validates and self.should_check_val()
        if run_validation:
            progress.phase = LoopPhase.VALIDATION
            rng = capture_rng()
            try:
                self._run_validation()
            except ValidationInterrupted:
                # A preemption notice gives seconds, a validation may take minutes: the checkpoint is written
                # as of this batch's end with its validation still to run, and the resumed run validates from
                # the same RNG state, as the uninterrupted run did.
                restore_rng(rng)
                progress.phase = LoopPhase.BATCH
                self.validation_interrupted = True
                context.stop.on_signal()  # saves the checkpoint and unwinds the run
                raise
        if context.strategy.lr_scheduler_configs:
            self.update_lr_schedulers("step", plateau=True)
        if progress.window.done or not self._automatic:
            progress.batches_that_stepped += 1
        progress.total_batch_idx += 1

    def epoch_end_outputs(self) -> list[Any]:
        """``training_epoch_end``'s argument: every batch's output, or one such list per optimizer when
        several optimizers run under automatic optimization (only the batches each one ran on)."""
        n = len(self.context.strategy.optimizers)
        if n > 1 and self._automatic:
            return [[out[i] for out in self.outputs if out[i]] for i in range(n)]
        return [out for out in self.outputs if out]

    # -- validation schedule ---------------------------------------------------------------------------
    def start_clock(self) -> None:
        """A time-based ``val_check_interval`` counts from the start of training."""
        self._last_val_time = time.monotonic()

    def should_check_val(self) -> bool:
        context = self.context
        progress = context.progress
        every = context.config.check_val_every_n_epoch
        if every is not None and (progress.current_epoch + 1) % every != 0:
            return False
        val_check_batch = context.batches.val_check
        stopping = context.stop.should_stop and context.stopping and can_stop_early(context)
        interval = context.config.val_check_interval
        if isinstance(interval, datetime.timedelta):  # by the clock: whenever that much time has passed
            now = time.monotonic()
            if self._last_val_time is None:
                self._last_val_time = now
            due = stopping or now - self._last_val_time >= interval.total_seconds()
            if due:
                self._last_val_time = now
        elif (self._is_last_batch and val_check_batch == math.inf) or stopping:
            due = True
        elif val_check_batch == math.inf:
            due = False  # not the last batch
        elif val_check_batch == 0:  # val_check_interval=0: taken by the Trainer, as Lightning does, but no schedule
            if context.data.validation_enabled():
                raise ZeroIntervalError(
                    "val_check_interval=0 gives no validation schedule: validation would run every 0 training "
                    "batches. Use an int >= 1 (a number of batches) or a float in [0.0, 1.0] (a fraction of the "
                    "epoch; 0.0 validates after every batch)."
                )
            due = False
        else:
            index = progress.total_batch_idx if every is None else progress.batch_idx - 1
            due = (index + 1) % int(val_check_batch) == 0
        # the schedule first: whether validation is enabled at all is the costlier question
        return due and context.data.validation_enabled()

    # -- learning-rate schedulers ----------------------------------------------------------------------
    def update_lr_schedulers(self, interval: str, plateau: bool, last_batch: bool = False) -> None:
        context = self.context
        strategy = context.strategy
        configs = strategy.lr_scheduler_configs
        module = context.module
        if not configs or module is None or not module.automatic_optimization:
            return
        if interval == "step" and self.accumulation_window_open and not last_batch:
            return
        progress = context.progress
        index = (progress.batch_idx - 1 if interval == "step" else progress.current_epoch) + 1
        # with optimizer frequencies, a 'step' scheduler steps only on batches its optimizer ran on
        active = self.automatic.active if interval == "step" and strategy.optimizer_frequencies else None
        skipped = strategy.precision_plugin.step_was_skipped
        for config in configs:
            if config.reduce_on_plateau != plateau or config.interval != interval:
                continue
            if active is not None and config.opt_idx is not None and config.opt_idx not in active:
                continue
            if interval == "step" and skipped(strategy.optimizers[config.opt_idx or 0]):
                continue  # the gradient scaler skipped this optimizer's step: its schedule waits too
            if index % config.frequency != 0:
                continue
            metric = None
            if config.reduce_on_plateau:
                metrics = context.metrics.current_callback_metrics()
                metric = metrics.get(config.monitor) if config.monitor else None
                if metric is None:
                    if config.strict:
                        raise MisconfigurationException(
                            f"ReduceLROnPlateau conditioned on metric {config.monitor!r} which is not available. "
                            f"Available metrics are: {sorted(metrics)}. Log it with self.log("
                            f"{config.monitor!r}, ...) or change the scheduler's 'monitor'."
                        )
                    self._warnings.warn(
                        f"ReduceLROnPlateau conditioned on metric {config.monitor!r} which is not available but "
                        "strict is set to `False`: the scheduler is not stepped.",
                        category=RuntimeWarning,
                    )
                    continue
            context.hooks.call_module_idx(
                "lr_scheduler_step", functools.partial(int, config.opt_idx or 0), config.scheduler, metric
            )
            progress.scheduler_steps.count()


__all__ = ["RestartStage", "TrainingEpochLoop"]


# Lightning's name for this loop (its test suites and some programs import or patch it)
_TrainingEpochLoop = TrainingEpochLoop


class RestartStage:
    """Where a restored training epoch restarts, as plain strings (what code that reads a Lightning epoch
    loop's restart stage compares with)."""

    NONE = "none"
    RESTARTED_ON_TRAIN_BATCH_END = "restarted_on_train_batch_end"
    RESTARTED_ON_LAST = "restarted_on_last"


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "is_param_in_hook_signature": "fulmen.utilities.signature_utils.is_param_in_hook_signature",
})  # fmt: skip

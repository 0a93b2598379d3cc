"""The fit loop: epochs of training batches, with validation when the schedule says.

The whole loop, every hook in order (``cb.`` callbacks then ``module.``; hooks in [] only when they apply)::

    setup: configure_callbacks, prepare_data, setup("fit"), configure_model, configure_optimizers
    on_fit_start                                           # from here on: FitLoop.run
    [a checkpoint's optimizer, scheduler and loop state restored]
    [sanity check: on_sanity_check_start, <validation run>, on_sanity_check_end]
    on_train_start
    for epoch in epochs:                                   # until max_epochs / max_steps / should_stop
        on_train_epoch_start
        for batch in train_dataloader:                     # up to limit_train_batches
            batch transfer hooks
            on_train_batch_start                           # -1 from the module ends the epoch
            for each active optimizer:                     # several: 1.x optimizer_idx, params toggled
                optimizer_step(closure) -> closure: training_step, [on_before_zero_grad,
                                           optimizer_zero_grad on the first batch of a window],
                                           on_before_backward, backward, on_after_backward;
                                           then on_before_optimizer_step, configure_gradient_clipping,
                                           optimizer.step
                (batches inside an accumulation window run the closure only)
            [lr_scheduler_step for 'step' schedulers; 'epoch' ones on the epoch's last batch]
            on_train_batch_end
            [validation run: on_validation_model_zero_grad, on_validation_model_eval, on_validation_start,
             on_validation_epoch_start, per batch: on_validation_batch_start, validation_step,
             on_validation_batch_end; on_validation_epoch_end, on_validation_end, on_validation_model_train]
        [training_epoch_end(outputs)]                      # 1.x hook, when overridden
        on_train_epoch_end  (callbacks, module, then monitoring callbacks: EarlyStopping, checkpoints)
    on_train_end
    on_fit_end                                             # FitLoop.run ends
    teardown("fit")

A run resumed from a checkpoint first finishes the epoch it was written in (see ``loops/resume.py``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from torch.utils.data import DataLoader as DataLoader

from fulmen.loops import resume
from fulmen.loops.evaluation_loop import EvaluationLoop
from fulmen.loops.fetchers import PrefetchIterator
from fulmen.loops.fetchers import prefetch_iterator as prefetch_iterator
from fulmen.loops.loader_state import data_parts as data_parts
from fulmen.loops.progress import Progress, progress_view
from fulmen.loops.training_data import TrainingData
from fulmen.loops.training_epoch_loop import TrainingEpochLoop, can_stop_early, max_steps_reached
from fulmen.runtime.results import ResultCollection
from fulmen.runtime.rng import capture_generator_states as capture_generator_states
from fulmen.runtime.rng import capture_rng, restore_rng
from fulmen.runtime.rng import restore_generator_states as restore_generator_states
from fulmen.runtime.state import LoopPhase, RunningStage
from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.utilities.combined_loader import CombinedLoader as CombinedLoader
from fulmen.utilities.data import has_len as has_len
from fulmen.utilities.data import has_len_all_ranks as has_len_all_ranks
from fulmen.utilities.data import parse_num_batches as parse_num_batches
from fulmen.utilities.data import set_sampler_epoch
from fulmen.utilities.data import sized_len as sized_len
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.exceptions import SIGTERMException as SIGTERMException
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import rank_zero_debug as rank_zero_debug
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn
from fulmen.utilities.sample_seeds import sample_seed_in_use as sample_seed_in_use
from fulmen.utilities.sample_seeds import sample_seeded as sample_seeded
from fulmen.utilities.warnings import PossibleUserWarning

if TYPE_CHECKING:
    from fulmen.runtime.context import RunContext
    from fulmen.runtime.data import DataLoaderSource


class _RunHolder(Protocol):
    """What Lightning's form of the constructor is given (a Trainer): the run it belongs to."""

    @property
    def run_context(self) -> RunContext: ...

    @property
    def validate_loop(self) -> EvaluationLoop: ...


class FitLoop:
    """Epochs of training with validation inside them, the sanity check first (``run``)."""

    def __init__(
        self, context: RunContext | _RunHolder, validate_loop: EvaluationLoop | None = None,
        min_epochs: int | None = 0, max_epochs: int | None = None,
    ) -> None:  # fmt: skip
        """``FitLoop(context, validate_loop)``: the Trainer's. ``FitLoop(trainer, min_epochs=..., max_epochs=...)``:
        Lightning's constructor (``_FitLoop``), for code that builds a fit loop and sets it on the trainer
        (``trainer.fit_loop = _FitLoop(trainer, min_epochs=1, max_epochs=5)``); the limits become the trainer's
        (the fit loop is where Lightning keeps them)."""
        lightnings_form = validate_loop is None
        if lightnings_form:  # the trainer's run, with these epoch limits
            holder = cast("_RunHolder", context)
            context, validate_loop = holder.run_context, holder.validate_loop
        context = cast("RunContext", context)
        assert validate_loop is not None
        self.context = context
        self.validate_loop = validate_loop  # the trainer's: ``validate()`` and fit share one
        self.results = ResultCollection(training=True)
        self._results_fresh = False  # reset by on_train_start for the first epoch already
        self.epoch_loop = TrainingEpochLoop(context, self.results, self.run_validation, validate_loop)
        self.training_data = TrainingData(context)
        self._resume: dict[str, Any] | None = None  # a checkpoint's loop state, applied when run starts
        self._first_batches: PrefetchIterator | None = None  # the first epoch's, made as the fit starts
        if lightnings_form:
            if max_epochs is not None:
                self.max_epochs = max_epochs
            self._set_limits(min_epochs=min_epochs)

    # -- limits ----------------------------------------------------------------------------------------
    @property
    def max_epochs(self) -> int:
        return self.context.config.max_epochs

    @max_epochs.setter
    def max_epochs(self, value: int) -> None:
        """``trainer.fit_loop.max_epochs = 10`` then ``trainer.fit(...)`` again trains on to epoch 10."""
        _check_limit("max_epochs", value)
        self._set_limits(max_epochs=value)

    @property
    def max_steps(self) -> int:
        return self.context.config.max_steps

    @max_steps.setter
    def max_steps(self, value: int) -> None:
        _check_limit("max_steps", value)
        self._set_limits(max_steps=value)

    def _set_limits(self, **limits: Any) -> None:
        # the config stays the one place the flags live: a new frozen copy with the limit replaced
        config = self.context.config
        arguments = {**config.arguments, **limits}
        self.context.config = dataclasses.replace(config, arguments=arguments, **limits)

    @property
    def min_epochs(self) -> int | None:
        return self.context.config.min_epochs

    @property
    def max_batches(self) -> int | float:
        """Training batches per epoch (``trainer.num_training_batches``), known once the data is set up."""
        return self.context.batches.train

    @max_batches.setter
    def max_batches(self, value: int | float) -> None:
        """A callback may cut the running epoch short (or lengthen it), as with Lightning's fit loop."""
        self.context.batches.train = value

    # -- Lightning's loop state, as views of fulmen's (read by callbacks and libraries) --------------------------
    @property
    def epoch_progress(self) -> Progress:
        """Epochs: ``current`` / ``total`` with ``ready`` / ``started`` / ``processed`` / ``completed``."""
        return progress_view(self.context.progress, lambda: self.epoch_loop.is_last_batch, "epoch_progress")

    @property
    def batch_idx(self) -> int:
        """The index of the running (or last) batch in this epoch."""
        return self.epoch_loop.batch_idx

    @property
    def total_batch_idx(self) -> int:
        return self.epoch_loop.total_batch_idx

    @property
    def restarting(self) -> bool:
        """Whether the loop is continuing a run restored from a checkpoint (until its first new batch)."""
        return self._resume is not None

    @property
    def train_dataloader(self) -> Any:
        """The loader of the running fit, or of the last one (as Lightning keeps it readable after fit)."""
        return self.training_data.train_dataloader

    @property
    def batches(self) -> PrefetchIterator | None:
        """The running epoch's batches (its data position, for checkpoints)."""
        return self.training_data.batches

    @property
    def epoch_start_rng(self) -> dict[str, Any] | None:
        """The RNG state just before the running epoch's shuffle was drawn."""
        return self.training_data.epoch_start_rng

    @property
    def _data_source(self) -> DataLoaderSource:
        """Where the training dataloaders come from (Lightning's name, which callbacks and libraries read)."""
        return self.context.data.source("train")

    def stop_reason(self) -> str | None:
        """Why training must not go on (``None``: it goes on)."""
        context = self.context
        progress = context.progress
        if self.max_batches == 0:
            return "no training batches"
        max_steps = context.config.max_steps
        if max_steps_reached(progress.global_step, max_steps):
            return f"`max_steps={max_steps}` reached"
        if self.max_epochs != -1 and progress.current_epoch >= self.max_epochs:
            return f"`max_epochs={self.max_epochs}` reached"
        if context.stopping and can_stop_early(context):
            return "`trainer.should_stop` was set"
        return None

    # -- data ------------------------------------------------------------------------------------------
    def setup_data(self) -> None:
        """Load the training data (again when it is due for a reload) and set the batch counts it implies."""
        self.training_data.setup()

    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps the whole fit is expected to take (``trainer.estimated_stepping_batches``)."""
        config = self.context.config
        if config.max_epochs == -1:
            return float("inf") if config.max_steps == -1 else config.max_steps
        if self.context.module is None:  # nothing attached yet (no fit): no loader to count, as for an iterable
            total: int | float = float("inf")
        else:
            self.setup_data()  # loads the running fit's loader once (a no-op when loaded)
            total = self.context.batches.train
        if total == float("inf"):
            return config.max_steps if config.max_steps != -1 else float("inf")
        estimate = math.ceil(total / self.context.accumulate_grad_batches) * max(config.max_epochs, 1)
        return min(estimate, config.max_steps) if config.max_steps != -1 else estimate

    # -- run -------------------------------------------------------------------------------------------
    def run(self, after_fit_start: Callable[[], None] | None = None) -> None:
        """``fit`` from ``on_fit_start`` to ``on_fit_end``; ``after_fit_start``: the trainer restores a
        checkpoint's training state there (optimizers and this loop's position)."""
        context = self.context
        hooks = context.hooks
        context.state.stage = RunningStage.TRAINING  # fit's stage until teardown (the sanity check enters its own)
        hooks.call_callbacks("on_fit_start")
        hooks.call_module("on_fit_start")
        if after_fit_start is not None:
            after_fit_start()
        self.run_sanity_check()
        self.train()
        hooks.call_callbacks("on_fit_end")
        hooks.call_module("on_fit_end")

    def setup_optimization(self) -> None:
        """Read how ``training_step`` takes several optimizers (again after a callback rebuilt them)."""
        module = self.context.module
        if module is not None and module.automatic_optimization:
            self.epoch_loop.automatic.setup()

    def train(self) -> None:
        """Epochs until a stop reason holds; ``on_train_start`` / ``on_train_end`` around them."""
        self.setup_data()
        reason = self.stop_reason()
        if reason is None:
            self.setup_optimization()
            pending, self._resume = self._resume, None
            if pending is not None and not resume.written_mid_epoch(pending):
                resume.restore_metrics(self, pending)
                if resume.written_at_epoch_end(pending):
                    # the rest of that epoch's end (scheduler step, epoch counter) before on_train_start, which
                    # then sees the epoch the run goes on with
                    self.on_advance_end(hooks=False)
            elif pending is None:
                # the first epoch's iterator is made now, when the training data is set up, before the validation
                # data is loaded and before on_train_start, as in Lightning: what draws random numbers (the
                # iterator's seed, a dataset drawn in val_dataloader()) draws in the same order, so that a seeded
                # run validates on the same data (the samplers' set_epoch follows in on_advance_start, as there:
                # a sampler reads its epoch when the first batch is drawn)
                self._first_batches = self.make_iterator()
            self.on_run_start()
            # the RNG and the data position after on_train_start: what that hook draws (an uninterrupted run
            # has no such call between its epochs) does not shift the run's random numbers
            if pending is not None and resume.written_mid_epoch(pending):
                self.run_epoch(interrupted=pending)  # what the interrupted run had left of its epoch
            elif pending is not None:
                resume.restore_at_boundary(self, pending)
            while (reason := self.stop_reason()) is None:
                self.run_epoch()
            rank_zero_info(f"`Trainer.fit` stopped: {reason}.")
            self.on_run_end()
        else:
            rank_zero_info(f"`Trainer.fit` stopped: {reason}.")

    def run_epoch(self, interrupted: dict[str, Any] | None = None) -> None:
        """One epoch: its start hooks, its batches, its end. ``interrupted``: the loop state of a checkpoint
        written inside this epoch; its parts are restored (``loops/resume.py``) and the epoch goes on from there."""
        # a resumed epoch whose training batches all ran (the checkpoint was written after its last batch) only
        # ends: its start hooks are not called again
        self.on_advance_start(fresh=interrupted is None,
                              hooks=interrupted is None or not resume.written_after_last_batch(interrupted))  # fmt: skip
        finish: bool | None = None
        if interrupted is None:
            batches, self._first_batches = self._first_batches or self.make_iterator(), None
        else:
            batches, finish = resume.restore_epoch(self, interrupted)
        with self.context.hooks.profile("run_training_epoch"):
            self.epoch_loop.run(batches, finish_batch=finish, resumed=interrupted is not None)
        self.on_advance_end()

    def make_iterator(
        self, skip: int = 0, epoch_rng: dict[str, Any] | None = None, loader: Any = None, offset: int = 0
    ) -> PrefetchIterator:
        """The epoch's batches (see ``TrainingData.make_iterator``)."""
        return self.training_data.make_iterator(skip=skip, epoch_rng=epoch_rng, loader=loader, offset=offset)

    def restore_epoch_results(self, items: dict[str, Any]) -> None:
        """The epoch's ``self.log(..., on_epoch=True)`` aggregates as a checkpoint holds them for this process."""
        self.results.load_state_dict(items, self.context.strategy.root_device, self.context.module)

    def load_resume_state(self, state: dict[str, Any]) -> None:
        """Counters from a checkpoint now; the rest of its state when the loop runs (see ``loops/resume``)."""
        resume.load_counters(self.context.progress, state)
        self._resume = state
        self.training_data.resumed_layout = state.get("data")

    # -- validation inside fit -------------------------------------------------------------------------
    def run_sanity_check(self) -> None:
        context = self.context
        steps = context.config.num_sanity_val_steps
        if steps <= 0 or not context.data.validation_enabled(load=False):  # num_sanity_val_steps=-2: none
            return
        if self._resume is not None and resume.written_mid_epoch(self._resume):
            return  # the run goes on inside an epoch: validation was checked before it was interrupted
        # the sanity check leaves the random generators as it found them (as Lightning does): a seeded run
        # trains on the same numbers whether it is on or off
        rng_before = capture_rng()
        with context.enter(RunningStage.SANITY_CHECKING):
            context.hooks.call_callbacks("on_sanity_check_start")
            loaders, counts = context.data.fit_val_dataloaders()
            # ``trainer.num_val_batches`` counts a full validation run from here on
            context.batches.val = context.data.reported_counts(loaders, counts)
            counts = [min(steps, c) for c in counts]
            context.batches.sanity = counts
            self.validate_loop.run(loaders, counts, in_fit=True)
            context.hooks.call_callbacks("on_sanity_check_end")
            context.metrics.reset()  # values logged during the sanity check must not reach callbacks or loggers
        restore_rng(rng_before)

    def run_validation(self) -> None:
        """A validation run inside the epoch, then the ranks agree on ``should_stop`` (they wait here anyway)."""
        context = self.context
        loaders, counts = context.data.fit_val_dataloaders()
        context.batches.val = context.data.reported_counts(loaders, counts)
        with context.enter(RunningStage.VALIDATING), context.hooks.profile("run_validation"):
            self.validate_loop.run(loaders, counts, in_fit=True)
        context.metrics.epoch_end = False  # reads during training see step values again
        context.stop.agree(context.strategy)

    # -- epochs ----------------------------------------------------------------------------------------
    def on_run_start(self) -> None:
        context = self.context
        # values logged in on_train_start count towards the first epoch's aggregates (as in Lightning)
        self.results.reset()
        self.results.sync = context.strategy.sync_metric
        context.results = self.results
        self._results_fresh = True
        self.epoch_loop.start_clock()
        every = context.config.check_val_every_n_epoch
        first_epoch_validates = every is None or (context.progress.current_epoch + 1) % every == 0
        if first_epoch_validates and context.data.validation_enabled(load=False):
            # the validation data is loaded before training starts when the first epoch validates, so that
            # ``trainer.num_val_batches`` and ``val_dataloaders`` are known to on_train_start and every batch hook
            context.batches.val = context.data.reported_counts(*context.data.fit_val_dataloaders())
        self._warn_modules_in_eval_mode()
        context.hooks.call_callbacks("on_train_start")
        context.hooks.call_module("on_train_start")
        context.strategy.on_train_start()

    def _warn_modules_in_eval_mode(self) -> None:
        """Submodules left in eval mode train differently (dropout off, frozen batch-norm statistics): often a
        frozen encoder on purpose, sometimes a mistake. Said before ``on_train_start``, in Lightning's words."""
        module = self.context.module
        in_eval = [name for name, m in module.named_modules() if not m.training] if module is not None else []
        if in_eval:
            rank_zero_warn(
                f"Found {len(in_eval)} module(s) in eval mode at the start of training. This may lead to"
                " unexpected behavior during training. If this is intentional, you can ignore this warning.",
                category=PossibleUserWarning,
            )

    def on_advance_start(self, fresh: bool = True, hooks: bool = True) -> None:
        context = self.context
        progress = context.progress
        progress.phase = LoopPhase.EPOCH_START
        if fresh:
            progress.epoch_start_step = progress.global_step
            progress.scheduler_steps.epoch = 0
        self.setup_data()
        set_sampler_epoch(self.training_data.loader, progress.current_epoch)  # a new order per epoch
        if not self._results_fresh:  # the first epoch keeps what on_train_start logged
            self.results.reset()
            self.results.sync = context.strategy.sync_metric  # sync_dist=True reduces across processes
        self._results_fresh = False
        context.results = self.results
        context.metrics.epoch_end = False
        if hooks:
            # the batch counters still show the last epoch's batches here (Lightning's trackers move on when the
            # first batch is fetched): a callback reading them at the epoch start sees what the last epoch ran
            context.hooks.call_callbacks("on_train_epoch_start")
            context.hooks.call_module("on_train_epoch_start")
        progress.batch_idx = 0

    def on_advance_end(self, hooks: bool = True) -> None:
        """End of an epoch; ``hooks=False`` when resuming from a checkpoint written in on_train_epoch_end."""
        context = self.context
        progress = context.progress
        context.results = self.results
        progress.phase = LoopPhase.EPOCH_END
        if hooks:
            dispatch = context.hooks
            context.metrics.refresh()  # the epoch's last step values stay in the views
            context.metrics.epoch_end = True  # from here on, reads of callback_metrics see epoch aggregates
            self.results.reduce_epoch()  # sync_dist values reduced here, where every rank is
            if self.epoch_loop._collect_outputs:  # the 1.x hook, only when overridden: outputs cost memory
                dispatch.call_module("training_epoch_end", self.epoch_loop.epoch_end_outputs())
            dispatch.call_callbacks("on_train_epoch_end", monitoring=False)
            dispatch.call_module("on_train_epoch_end")
            dispatch.call_callbacks("on_train_epoch_end", monitoring=True)
            context.metrics.on_train_epoch_end(self.results)
            self.results.release_metrics()
        context.stop.agree(context.strategy)
        if not hooks or self.epoch_loop.num_ready_batches_reached():
            self.epoch_loop.update_lr_schedulers("epoch", plateau=True)
        progress.current_epoch += 1
        progress.phase = LoopPhase.IDLE  # at an epoch boundary: a checkpoint written now resumes with the next

    def on_run_end(self) -> None:
        self.context.progress.phase = LoopPhase.IDLE
        self.context.hooks.call_callbacks("on_train_end")
        self.context.hooks.call_module("on_train_end")
        self.context.strategy.on_train_end()

    def teardown(self) -> None:
        self.training_data.teardown()
        self._first_batches = None


def _check_limit(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < -1:
        raise MisconfigurationException(f"fit_loop.{name}={value!r} must be an int >= -1 (-1: no limit).")


__all__ = ["FitLoop", "LoopPhase", "RestartStage"]


# Lightning's name for this loop (its test suites and some programs import or patch it)
_FitLoop = FitLoop


class RestartStage:
    """Where in an epoch a restored fit loop restarts, as plain strings (what code that reads a Lightning fit
    loop's restart stage compares with)."""

    NONE = "none"
    RESTARTED_ON_EPOCH_START = "restarted_on_epoch_start"
    RESTARTED_MID_EPOCH = "restarted_mid_epoch"
    RESTARTED_ON_EPOCH_END = "restarted_on_epoch_end"
    RESUMED_ON_EPOCH_END = "resumed_on_epoch_end"

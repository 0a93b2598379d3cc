"""The stage runner: one fit / validate / test / predict in this process, from set-up to teardown.

``Trainer._run`` hands it to ``strategy.launch`` (the identity, except for strategies that start their own
processes), which calls :meth:`StageRunner.run` in each process.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.runtime.context import CheckpointRequest
from fulmen.runtime.state import LoopPhase, RunningStage, TrainerFn, TrainerStatus
from fulmen.trainer import checkpointing, configuration_validator
from fulmen.trainer.connectors import attach_model_callbacks
from fulmen.trainer.signals import SignalInterrupt, slurm_requeued
from fulmen.trainer.torch_settings import torch_settings as torch_settings  # importable from here as before
from fulmen.utilities.exceptions import _TunerExitException
from fulmen.utilities.model_helpers import is_overridden
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning
from fulmen.utilities.watchdog import HangWatchdog

if TYPE_CHECKING:
    from fulmen.runtime.context import RunContext
    from fulmen.trainer.signals import SignalConnector
    from fulmen.trainer.trainer import Trainer

_log = logging.getLogger(__name__)


class StageRunner:
    def __init__(self, trainer: Trainer, context: RunContext, signals: SignalConnector) -> None:
        self.trainer = trainer
        self.context = context
        self.signals = signals
        # ``trainer._checkpoint_connector``: restores ``ckpt_path`` in the steps below, and callbacks use it too
        self.checkpoints = checkpointing.CheckpointConnector(trainer)
        self._watchdog: HangWatchdog | None = None  # several processes: ends this one if it hangs
        self._torn_down: set[str] = set()  # the parts of the stage's teardown already run (each runs once)
        self._loop_options = (TrainerFn.FITTING, True, True)  # the running stage's: (fn, verbose, return_predictions)

    def run(
        self, model: LightningModule, fn: TrainerFn, ckpt_path: Any, weights_only: bool | None = None,
        verbose: bool = True, return_predictions: bool = True,
    ) -> Any:  # fmt: skip
        """The stage, with the torch settings the flags ask for held during it and put back after it."""
        with torch_settings(self.context.config, self.context.strategy.root_device):
            return self._run_stage(model, fn, ckpt_path, weights_only, verbose, return_predictions)

    def _run_stage(
        self, model: LightningModule, fn: TrainerFn, ckpt_path: Any, weights_only: bool | None, verbose: bool,
        return_predictions: bool,
    ) -> Any:  # fmt: skip
        context, trainer, state = self.context, self.trainer, self.context.state
        profiler = self._start(model, fn)
        self._configure(fn, profiler)
        if ckpt_path is None and fn == TrainerFn.FITTING:
            ckpt_path = _automatic_resume(context.callbacks, trainer.default_root_dir)
        context.checkpoint_request = CheckpointRequest(ckpt_path, weights_only)
        if fn == TrainerFn.FITTING:
            self.signals.install()
        self._torn_down = set()
        try:
            self._setup(model, fn)
            self._loop_options = (fn, verbose, return_predictions)
            result = trainer._run_stage()  # through the Trainer: Lightning's tests patch it there
            self._teardown(fn)
            state.status = TrainerStatus.FINISHED
            state.stage = None
            return result
        except _TunerExitException:  # a finder with `_early_exit` set has done its search: the run ends there
            self._teardown(fn)
            state.status = TrainerStatus.FINISHED
            state.stage = None
            return None
        except BaseException as exception:
            if self._fail(exception, fn):
                return None
            if isinstance(exception, KeyboardInterrupt):
                # the run is torn down (callbacks told, loggers finalized); then the process ends with status 1,
                # as with Lightning, rather than going on with the rest of the script
                raise SystemExit(1) from None
            raise

    def _start(self, model: LightningModule, fn: TrainerFn) -> Any:
        """The stage begins: its state, the module connected to the trainer and strategy, the profiler set up
        (returned: ``None`` without one)."""
        context, trainer, strategy = self.context, self.trainer, self.context.strategy
        state = context.state
        state.fn, state.status = fn, TrainerStatus.RUNNING
        if fn == TrainerFn.FITTING:  # a GradientAccumulationScheduler of an earlier fit changed it
            context.accumulate_grad_batches = context.config.accumulate_grad_batches
        context.stop.reset()
        context.metrics.start_run()
        context.module = model
        model.trainer = trainer
        strategy.connect(model)
        profiler = context.profiler
        if profiler is not None:
            profiler.setup(stage=fn.value, local_rank=strategy.local_rank if strategy.world_size > 1 else None,
                           log_dir=trainer.log_dir)  # fmt: skip
            profiler.attach_module(model)
        return profiler

    def _configure(self, fn: TrainerFn, profiler: Any) -> None:
        """The module's ``configure_callbacks`` joined in, and the loop configuration checked; a failure here
        tears the profiler down (no run: no report)."""
        context, trainer, hooks = self.context, self.trainer, self.context.hooks
        hooks.reset()
        try:
            context.callbacks = attach_model_callbacks(trainer.callbacks, hooks.call_module("configure_callbacks"))
            hooks.reset()
            configuration_validator._verify_loop_configurations(trainer)
            if fn == TrainerFn.FITTING and context.config.max_epochs_defaulted:
                context.max_epochs_default_applied = True
                rank_zero_warn(
                    "`max_epochs` was not set. Setting it to 1000 epochs. To train without an epoch limit, set "
                    "`max_epochs=-1`.",
                    category=PossibleUserWarning,
                )
        except BaseException:
            if profiler is not None:
                profiler.teardown(fn.value)  # no run: no report, and torch's profiler must not stay on
            raise

    def _fail(self, exception: BaseException, fn: TrainerFn) -> bool:
        """A stage that raised: the status, the strategy and the ``on_exception`` hooks told, the stage torn down.
        ``True``: a handled signal, after which the run ends quietly (the caller re-raises anything else)."""
        state, hooks = self.context.state, self.context.hooks
        if isinstance(exception, KeyboardInterrupt):  # Ctrl-C: also a handled one (a CtrlCInterrupt)
            if not isinstance(exception, SignalInterrupt):  # a handled one said so when it came
                rank_zero_info("\nDetected KeyboardInterrupt, attempting graceful shutdown ...")
            self.signals.ignore_ctrl_c()  # until teardown restores the handler
        state.status = TrainerStatus.INTERRUPTED
        if not isinstance(exception, (SignalInterrupt, KeyboardInterrupt)):
            self.context.strategy.on_exception(exception)  # e.g. DDP: name the rank, release the other ranks
        hooks.call_callbacks("on_exception", exception)
        hooks.call_datamodule("on_exception", exception)
        self._teardown_after(exception, fn)
        if isinstance(exception, SignalInterrupt):
            self.signals.after_teardown(exception)
            return True
        return False

    def run_loop(self) -> Any:
        """The set-up stage's loop (``Trainer._run_stage``): fit's, an evaluation's or the prediction's."""
        fn, verbose, return_predictions = self._loop_options
        if fn == TrainerFn.FITTING:
            self.trainer.fit_loop.run(after_fit_start=self._restore_training_state)
            return None
        if fn == TrainerFn.PREDICTING:
            return self._predict(return_predictions)
        return self._evaluate(fn, verbose)

    # -- before the loop ------------------------------------------------------------------------------
    def _setup(self, model: LightningModule, fn: TrainerFn) -> None:
        context, trainer = self.context, self.trainer
        hooks, strategy, config = context.hooks, context.strategy, context.config
        strategy.setup_environment()
        self._start_watchdog()
        self.prepare_data()
        # the enum (a str: `stage == "fit"` holds), as Lightning passes it: a hook that prints or formats `stage`
        # shows `TrainerFn.FITTING` with both
        stage = fn
        for logger in context.loggers:
            getattr(logger, "experiment", None)  # created now, as Lightning does: name / version exist for callbacks
        if context.datamodule is not None:
            hooks.call_datamodule("setup", stage=stage)
        hooks.call_callbacks("setup", stage=stage)
        hooks.call_module("setup", stage=stage)
        with strategy.precision_plugin.module_init_context():  # '64-true': the layers made here in float64
            for hook in ("configure_sharded_model", "configure_model"):
                # a strategy that shards layers as they are made does it in its context (entered, as in
                # Lightning, only for a hook the module implements)
                overridden = hooks.module_overrides(hook)
                with strategy.model_sharded_context() if overridden else contextlib.nullcontext():
                    hooks.call_module(hook)
        after_setup = strategy.restore_checkpoint_after_setup  # sharded: the shards load into the sharded model
        if not after_setup:
            self._load_requested_checkpoint()
        layer_sync = config.layer_sync if fn == TrainerFn.FITTING else None  # synchronised layers train only
        strategy.connect_run(hooks, config.gradient_clip_val, config.gradient_clip_algorithm, layer_sync)
        strategy.setup(trainer)
        if after_setup:
            self._load_requested_checkpoint()
        if fn == TrainerFn.FITTING:
            strategy.setup_optimizers(trainer)
            trainer.fit_loop.setup_optimization()  # a wrong training_step signature fails before any hook
        if context.loggers and config.enable_autolog_hparams and fn == TrainerFn.FITTING:
            self._log_hyperparams(model)
        if fn != TrainerFn.FITTING:  # fit's checkpoint is held until its training state is restored
            self.checkpoints.resume_end()

    def prepare_data(self) -> None:
        """The data module's, then the module's ``prepare_data``, each in one process of every machine
        (``prepare_data_per_node=True``, the default: local rank 0) or of the whole job (``False``: on the first
        machine only): a data set is downloaded once, not by every process into the same files. The other
        processes wait for it, for however long it takes (the hang watchdog does not count that time)."""
        trainer, hooks = self.trainer, self.context.hooks
        # read through the trainer: what a test or a library patches there (`Trainer.local_rank`) counts
        local_zero = trainer.local_rank == 0
        first_machine = local_zero and trainer.node_rank == 0
        owners = ((trainer.datamodule, LightningDataModule, hooks.call_datamodule),
                  (trainer.lightning_module, LightningModule, hooks.call_module))  # fmt: skip
        for owner, base, call in owners:
            if owner is None or not is_overridden("prepare_data", owner, base):
                continue
            chosen = local_zero if owner.prepare_data_per_node else first_machine
            watchdog = self._watchdog
            paused = watchdog.paused() if watchdog is not None else contextlib.nullcontext()
            with paused, self.context.strategy.all_wait_after("prepare_data"):
                if chosen:
                    call("prepare_data")

    def _restore_training_state(self) -> None:
        """Optimizers, schedulers and the loop position, after ``on_fit_start`` as in Lightning: a callback
        sees the run before the resumed state (BaseFinetuning rebuilds the optimizer's parameter groups
        there, so that the saved optimizer state fits them)."""
        self.checkpoints.restore_training_state()
        self.checkpoints.resume_end()
        self._start_clean()

    def _start_clean(self) -> None:
        """Gradients left by an earlier run (or by the user) neither count nor hold memory: cleared as a stage
        starts (for fit, after on_fit_start and the resumed state), as in Lightning."""
        module = self.context.module
        if module is not None:
            module.zero_grad()

    def _load_requested_checkpoint(self) -> None:
        """Load ``ckpt_path`` (weights, datamodule and callback states); training state follows later."""
        request = self.context.checkpoint_request
        path = checkpointing.resolve_ckpt_path(self.trainer, request.path)
        self.checkpoints.restore_modules_and_callbacks(path, weights_only=request.weights_only)

    def _log_hyperparams(self, model: LightningModule) -> None:
        hparams: dict[str, Any] = {}
        if model.log_hyperparams_enabled:
            hparams.update(model.hparams_initial)
        datamodule = self.context.datamodule
        if datamodule is not None and datamodule.log_hyperparams_enabled:
            theirs = datamodule.hparams_initial
            # `_class_path` / `_instantiator` are LightningCLI's records of how each was built, not hyperparameters
            clashing = sorted(str(k) for k in theirs.keys() & hparams.keys()
                              if not str(k).startswith("_") and _differ(hparams[k], theirs[k]))  # fmt: skip
            if clashing:  # one logged value would silently replace the other
                raise RuntimeError(
                    f"Error while merging hparams: {clashing} are in both the LightningModule's and the "
                    "LightningDataModule's hparams, with different values. Rename one, or save it in one place only."
                )
            hparams.update(theirs)
        for logger in self.context.loggers:
            if hparams:
                logger.log_hyperparams(hparams)
            if hasattr(logger, "log_graph"):
                logger.log_graph(model)
            logger.save()

    # -- the stages other than fit ----------------------------------------------------------------------
    def _evaluate(self, fn: TrainerFn, verbose: bool) -> list[dict[str, float]]:
        self._start_clean()
        context, trainer = self.context, self.trainer
        stage = "val" if fn == TrainerFn.VALIDATING else "test"
        context.state.stage = RunningStage.VALIDATING if stage == "val" else RunningStage.TESTING
        loaders, counts = context.data.request_eval_dataloaders(stage)
        if stage == "val":
            context.batches.val = context.data.reported_counts(loaders, counts)
            context.data.val_dataloaders = loaders
            loop = trainer.validate_loop
        else:
            context.batches.test = context.data.reported_counts(loaders, counts)
            loop = trainer.test_loop
        context.metrics.reset()
        results = loop.run(loaders, counts, in_fit=False)
        if verbose and trainer.is_global_zero and results:
            _print_results(results, "Validate" if stage == "val" else "Test")
        return results

    def _predict(self, return_predictions: bool) -> Any:
        self._start_clean()
        context, trainer = self.context, self.trainer
        context.state.stage = RunningStage.PREDICTING
        loaders, counts = context.data.request_eval_dataloaders("predict")
        context.batches.predict = counts
        context.metrics.reset()  # a run starts with no metrics: the last test's are not predict's
        trainer.predictions = trainer.predict_loop.run(loaders, counts, return_predictions)
        return trainer.predictions

    def _start_watchdog(self) -> None:
        """With several processes, a process that makes no progress for ``strategy.hang_timeout`` reports where
        it is, with its stack, and ends (``utilities/watchdog.py``), so a hang ends the job within minutes."""
        context = self.context
        strategy = context.strategy
        limit = strategy.hang_timeout
        if strategy.world_size < 2 or limit is None or self._watchdog is not None:
            return
        progress = context.progress

        def advanced() -> tuple[int, int, int, int]:
            return progress.total_batch_idx, progress.global_step, context.ticks, strategy.collectives_done

        def where() -> str:
            stage = context.state.stage
            at = f"{stage.value if stage is not None else 'setting up'}, epoch {progress.current_epoch}, batch {progress.batch_idx}"
            if strategy.in_collective is not None:
                return f"{at}, inside the collective {strategy.in_collective}"
            if stage is RunningStage.TRAINING and progress.phase is LoopPhase.STEP:
                return f"{at}, in the training step (DDP and FSDP exchange gradients in its backward)"
            return f"{at}, not inside one of fulmen's collectives"

        name = f"rank {strategy.global_rank} of {strategy.world_size} (pid {os.getpid()})"
        self._watchdog = HangWatchdog(limit.total_seconds(), advanced, where, name)
        self._watchdog.start()

    def _teardown(self, fn: TrainerFn, interrupted: bool = False) -> None:
        """The stage's teardown hooks, the loggers' finalize, the strategy's teardown (process group, pending
        background checkpoint saves), then the watchdog, signal handlers and profiler report.

        Each part runs once: when one raises at the end of a run that went well, the exception path calls this
        again and only the parts not yet run follow (no hook is called twice). Within a call every part runs
        even when one before it raised (a failing hook must not leave the logs unflushed or the signal handlers
        installed), and the first error is raised once all ran; except that a failing teardown hook of a run
        that went well stops here, so that the loggers are finalized once, as ``"failed"``. After an exception
        (``interrupted``) the teardown hooks are not called."""
        context = self.context
        hooks, stage = context.hooks, fn  # the enum, as in setup
        errors = _FirstError()
        # A run an exception ended calls no ``teardown`` hook (its callbacks heard ``on_exception``): code that
        # runs in ``teardown`` may assume the stage completed (writing final results, moving files), and
        # Lightning's hook order has no teardown after an exception, which callbacks written for it rely on.
        if self._once("hooks") and not interrupted:
            if context.datamodule is not None:
                with errors:
                    hooks.call_datamodule("teardown", stage=stage)
            with errors:
                hooks.call_callbacks("teardown", stage=stage)
            with errors:
                hooks.call_module("teardown", stage=stage)
            errors.raise_first()
        if self._once("loop"):
            with errors:
                self.trainer.fit_loop.teardown()
        if self._once("loggers"):
            for logger in context.loggers:
                with errors:
                    logger.finalize("success" if not interrupted else "failed")
        if self._once("strategy"):
            with errors:
                context.strategy.teardown()
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None
        context.results = None
        self.signals.restore()
        if context.profiler is not None and self._once("profiler"):
            with errors:
                context.profiler.describe()  # the report: a file per stage (and rank), or printed on rank zero
        errors.raise_first()

    def release(self) -> None:
        """Give back what a run holds (its loop's iterators, the strategy's processes and files, the hang
        watchdog, the signal handlers), unless its teardown did already; no hook is called. Lightning's
        ``trainer._teardown()``, which code calls after a run to be sure nothing is left open."""
        errors = _FirstError()
        for part, step in (
            ("loop", self.trainer.fit_loop.teardown),
            ("strategy", self.context.strategy.teardown),
        ):
            if self._once(part):
                with errors:
                    step()
        if self._watchdog is not None:
            self._watchdog.stop()
            self._watchdog = None
        self.signals.restore()
        errors.raise_first()

    def _once(self, part: str) -> bool:
        """Whether teardown's ``part`` is still to run (it counts as run from now on)."""
        if part in self._torn_down:
            return False
        self._torn_down.add(part)
        return True

    def _teardown_after(self, exception: BaseException, fn: TrainerFn) -> None:
        """Teardown of a run that ``exception`` ended. An error of the teardown itself (a background checkpoint
        save that failed, a ``teardown`` hook) is raised in place of a stop the user asked for (Ctrl-C, a
        preemption signal): that stop was to leave a checkpoint, and it did not (a SLURM job is still requeued,
        to resume from the last checkpoint that was saved). Any other ``exception`` is the
        run's cause and stays the one raised; the teardown error is logged and attached to it as a note."""
        try:
            self._teardown(fn, interrupted=True)
        except Exception as teardown_error:
            if isinstance(exception, SignalInterrupt):
                self.signals.requeue_if_asked(exception)  # resumes from the last checkpoint that did save
            if isinstance(exception, (SignalInterrupt, KeyboardInterrupt)):
                raise
            message = f"The teardown after the error failed too: {type(teardown_error).__name__}: {teardown_error}"
            _log.error(message, exc_info=teardown_error)
            if hasattr(exception, "add_note"):  # Python >= 3.11: shown under the traceback
                exception.add_note(message)


class _FirstError:
    """A context manager that keeps the first ``Exception`` raised in any of its blocks and lets the code after
    the block run; :meth:`raise_first` raises it. (``KeyboardInterrupt`` and ``SystemExit`` pass through.)"""

    def __init__(self) -> None:
        self.error: Exception | None = None

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> bool:
        if isinstance(error, Exception):
            if self.error is None:
                self.error = error
            return True
        return False

    def raise_first(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def _automatic_resume(callbacks: Sequence[Any], default_root_dir: str) -> str | None:
    """Where a fit given no ``ckpt_path`` picks up: in a SLURM job, the newest HPC checkpoint in
    ``default_root_dir`` (``hpc_ckpt_<n>.ckpt``, written before a requeue), else a requeued job's last checkpoint;
    a run an exception ended from the file its ``OnExceptionCheckpoint`` left."""
    from fulmen.callbacks.on_exception_checkpoint import OnExceptionCheckpoint
    from fulmen.plugins.environments import SLURMEnvironment

    if SLURMEnvironment.detect() and checkpointing.hpc_resume_path(default_root_dir) is not None:
        return "hpc"
    if slurm_requeued():
        return "last"
    for callback in callbacks:
        if isinstance(callback, OnExceptionCheckpoint) and (path := callback.resume_path()) is not None:
            rank_zero_info(f"Resuming from {path!r}, which OnExceptionCheckpoint saved when the last run failed.")
            return path
    return None


def _print_results(results: list[dict[str, float]], title: str) -> None:
    rows = sorted({k for r in results for k in r})
    if not rows:
        return
    headers = [f"{title} metric", *[f"DataLoader {i}" for i in range(len(results))]]
    table = [[k, *[f"{r[k]:.6g}" if k in r else "" for r in results]] for k in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *table)]
    line = "-" * (sum(widths) + 3 * (len(widths) - 1))
    print(line)
    print(" | ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print(line)
    for row in table:
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)))
    print(line)


def _differ(a: Any, b: Any) -> bool:
    try:
        return bool(a != b)
    except Exception:  # tensors and arrays compare element-wise: different unless the same object
        return a is not b

"""The fit loop: epochs of training batches, with validation when the schedule says.

The whole loop, every hook in order (``cb.`` callbacks then ``module.``; hooks in [] only when they apply)::

    setup: configure_callbacks, prepare_data, setup("fit"), configure_model, configure_optimizers
    on_fit_start
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
    on_fit_end, teardown("fit")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.loops.fetcher import PrefetchIterator
from fulmen.loops.training_epoch import TrainingEpochLoop
from fulmen.trainer import checkpointing
from fulmen.trainer.logging import ResultCollection
from fulmen.utilities.data import has_len, is_iterable_dataset, parse_num_batches
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer


def _reached(value: int, limit: int | None) -> bool:
    return limit is not None and limit != -1 and value >= limit


class FitLoop:
    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self.epoch_loop = TrainingEpochLoop(trainer)
        self.results = ResultCollection(training=True)
        self._train_dataloader: Any = None
        self.max_batches: int | float = 0
        self._last_reload_epoch: int | None = None
        self._stop_reason: str | None = None
        # Where the loop is, for checkpoints: idle | epoch_start | between | step | batch | validation | epoch_end
        self.phase = "idle"
        self.epoch_start_step = 0
        self._epoch_start_rng: dict[str, Any] | None = None
        self._resume: dict[str, Any] | None = None

    # -- limits ----------------------------------------------------------------------------------------
    @property
    def max_epochs(self) -> int:
        return self.trainer._loop_config.max_epochs

    @property
    def min_epochs(self) -> int | None:
        return self.trainer._loop_config.min_epochs

    @property
    def can_stop_early(self) -> bool:
        """should_stop is honoured only once min_epochs and min_steps are met."""
        cfg = self.trainer._loop_config
        progress = self.trainer._progress
        met_epochs = cfg.min_epochs is None or progress.current_epoch >= cfg.min_epochs
        met_steps = cfg.min_steps is None or progress.global_step >= cfg.min_steps
        return met_epochs and met_steps

    @property
    def done(self) -> bool:
        trainer = self.trainer
        progress = trainer._progress
        if self.max_batches == 0:
            self._stop_reason = "no training batches"
            return True
        if _reached(progress.global_step, trainer.max_steps):
            self._stop_reason = f"`max_steps={trainer.max_steps}` reached"
            return True
        if _reached(progress.current_epoch, self.max_epochs):
            self._stop_reason = f"`max_epochs={self.max_epochs}` reached"
            return True
        if trainer._stopping and self.can_stop_early:
            self._stop_reason = "`trainer.should_stop` was set"
            return True
        return False

    # -- data ------------------------------------------------------------------------------------------
    def setup_data(self) -> None:
        trainer = self.trainer
        cfg = trainer._loop_config
        every = cfg.reload_dataloaders_every_n_epochs
        epoch = trainer.current_epoch
        if self._train_dataloader is not None and not (
            every and self._last_reload_epoch is not None and epoch - self._last_reload_epoch >= every
        ):
            return
        loader = trainer._data.request_train_dataloader()
        self._train_dataloader = loader
        self._last_reload_epoch = epoch
        length: int | float = len(loader) if has_len(loader) else float("inf")
        self.max_batches = parse_num_batches("train", length, cfg.limit_train_batches)
        if self.max_batches == 0 and length > 0:
            rank_zero_warn("limit_train_batches selects 0 training batches: training is skipped.")
        trainer.num_training_batches = self.max_batches
        self._setup_val_check_batch(loader)

    def _setup_val_check_batch(self, loader: Any) -> None:
        trainer = self.trainer
        cfg = trainer._loop_config
        vci = cfg.val_check_interval
        if isinstance(vci, int):
            if cfg.check_val_every_n_epoch is not None and vci > self.max_batches:
                raise ValueError(
                    f"val_check_interval={vci} is larger than the number of training batches per epoch "
                    f"({self.max_batches}). Use a value <= {self.max_batches}, set check_val_every_n_epoch=None "
                    "to count batches across epochs, or limit_val_batches=0 to disable validation."
                )
            trainer.val_check_batch = vci
        elif self.max_batches == float("inf") or (is_iterable_dataset(loader) and not has_len(loader)):
            if vci != 1.0:
                raise MisconfigurationException(
                    f"val_check_interval={vci!r} is a fraction of an epoch, but the training dataloader is an "
                    "IterableDataset without a length. Pass an int (validate every N training batches) or 1.0."
                )
            trainer.val_check_batch = float("inf")
        else:
            trainer.val_check_batch = max(1, int(self.max_batches * vci))

    # -- run -------------------------------------------------------------------------------------------
    def run(self) -> None:
        self.setup_data()
        if self.done:
            if self._stop_reason:
                rank_zero_info(f"`Trainer.fit` stopped: {self._stop_reason}.")
            return
        self.on_run_start()
        resume, self._resume = self._resume, None
        if resume is not None:
            self._finish_interrupted_epoch(resume)
        while not self.done:
            self.on_advance_start()
            self.epoch_loop.run(self._make_iterator())
            self.on_advance_end()
        if self._stop_reason:
            rank_zero_info(f"`Trainer.fit` stopped: {self._stop_reason}.")
        self.on_run_end()

    def _make_iterator(self, skip: int = 0, epoch_rng: dict[str, Any] | None = None) -> PrefetchIterator:
        """The epoch's batches. The RNG state just before the loader's iterator draws its shuffle seed is kept
        so that a resumed run can redraw the same order (``epoch_rng``) and skip the batches already done."""
        loader = self._train_dataloader
        if epoch_rng is None:
            epoch_rng = {"rng": checkpointing.capture_rng(),
                         "generators": checkpointing.capture_generator_states(loader)}  # fmt: skip
        else:
            checkpointing.restore_rng(epoch_rng["rng"])
            checkpointing.restore_generator_states(loader, epoch_rng["generators"])
        self._epoch_start_rng = epoch_rng
        return PrefetchIterator(
            loader, self.max_batches, skip=skip, quiet_base_seed=self._quiet_base_seed(skip)
        )

    def _quiet_base_seed(self, skip: int) -> bool:
        """Whether this epoch's iterator must leave the global RNG alone: a persistent-workers loader starts
        its workers (drawing a base seed) once per load; an uninterrupted run loads it at epoch 0 and then
        every ``reload_dataloaders_every_n_epochs``."""
        loader = self._train_dataloader
        if not getattr(loader, "persistent_workers", False):
            return False
        epoch = self.trainer.current_epoch
        every = self.trainer._loop_config.reload_dataloaders_every_n_epochs
        load_epoch = epoch == 0 if not every else epoch % every == 0
        if skip:  # a one-off loader: it draws where the uninterrupted run started its workers this epoch
            return not load_epoch
        return getattr(loader, "_iterator", None) is None and not load_epoch

    # -- exact resume ----------------------------------------------------------------------------------
    def resume_state(self) -> dict[str, Any]:
        """What a checkpoint written now needs to continue exactly from this point."""
        trainer = self.trainer
        progress = trainer._progress
        phase, batch_idx = self.phase, progress.batch_idx
        window = self.epoch_loop.window_state(before_current_batch=phase == "step")
        if phase == "step":  # written during training_step: resume before this batch (not bitwise)
            phase, batch_idx = "between", batch_idx - 1
        elif phase == "epoch_start":
            phase, batch_idx, window = "between", 0, [0, 1, True]
        module = trainer.lightning_module
        grads = None
        if phase in ("batch", "validation", "between") and module is not None:
            window_open = not module.automatic_optimization or not window[2]
            if window_open:
                grads = [p.grad.detach().clone() if p.grad is not None else None for p in module.parameters()]
                if all(g is None for g in grads):
                    grads = None
        metrics = {k: v.detach().cpu().clone() if hasattr(v, "detach") else v
                   for k, v in trainer.callback_metrics.items()}  # fmt: skip
        return {
            "phase": phase, "epoch": progress.current_epoch, "global_step": progress.global_step,
            "batch_idx": batch_idx, "total_batch_idx": progress.total_batch_idx,
            "batches_that_stepped": progress.batches_that_stepped,
            "is_last_batch": self.epoch_loop.is_last_batch,
            "val_pending": phase == "batch" and self.epoch_loop._should_check_val(),
            "should_stop": trainer.should_stop, "epoch_start_step": self.epoch_start_step,
            "scheduler_steps": list(self.epoch_loop.scheduler_steps), "window": window,
            "rng": checkpointing.capture_rng(),
            "epoch_start_rng": self._epoch_start_rng if phase in ("batch", "validation", "between") else None,
            "grads": grads, "callback_metrics": metrics,
        }  # fmt: skip

    def load_resume_state(self, state: dict[str, Any]) -> None:
        progress = self.trainer._progress
        progress.current_epoch = int(state["epoch"])
        progress.global_step = int(state["global_step"])
        progress.batch_idx = int(state.get("batch_idx", 0))
        progress.total_batch_idx = int(state.get("total_batch_idx", 0))
        progress.batches_that_stepped = int(state.get("batches_that_stepped", 0))
        self.epoch_start_step = int(state.get("epoch_start_step", progress.global_step))
        self.epoch_loop.scheduler_steps = list(state.get("scheduler_steps", [0, 0]))
        self._resume = state

    def _restore_point(self, state: dict[str, Any]) -> None:
        """RNG, open accumulation window and metrics as they were when the checkpoint was written."""
        trainer = self.trainer
        if state.get("rng"):
            checkpointing.restore_rng(state["rng"])
        grads = state.get("grads")
        module = trainer.lightning_module
        if grads is not None and module is not None:
            for param, grad in zip(module.parameters(), grads):
                param.grad = None if grad is None else grad.to(param.device, copy=True)
        trainer._metrics.callback.update(state.get("callback_metrics") or {})
        trainer.should_stop = bool(state.get("should_stop", False))
        trainer._stop_agreed = True  # every rank loaded the same checkpoint

    def _finish_interrupted_epoch(self, state: dict[str, Any]) -> None:
        """Run what the interrupted run had left of its epoch when the checkpoint was written."""
        trainer = self.trainer
        phase = state["phase"]
        if phase in ("batch", "validation", "between"):
            batch_idx = int(state["batch_idx"])
            self.on_advance_start(fresh=False)
            trainer._progress.batch_idx = batch_idx
            batches = self._make_iterator(skip=batch_idx, epoch_rng=state.get("epoch_start_rng"))
            self._restore_point(state)
            epoch_loop = self.epoch_loop
            epoch_loop.reset_epoch()
            epoch_loop._is_last_batch = bool(state.get("is_last_batch", False))
            epoch_loop.load_window_state(state.get("window"), batch_idx)
            finish = None if phase == "between" else bool(state.get("val_pending")) and phase == "batch"
            epoch_loop.run(batches, finish_batch=finish, resumed=True)
            self.on_advance_end()
        elif phase == "epoch_end":
            self._restore_point(state)
            self.on_advance_end(hooks=False)
        else:
            self._restore_point(state)

    def on_run_start(self) -> None:
        trainer = self.trainer
        trainer._hooks.call_callbacks("on_train_start")
        trainer._hooks.call_module("on_train_start")

    def on_advance_start(self, fresh: bool = True) -> None:
        trainer = self.trainer
        self.phase = "epoch_start"
        if fresh:
            self.epoch_start_step = trainer._progress.global_step
            self.epoch_loop.scheduler_steps[1] = 0
        self.setup_data()
        epoch = trainer.current_epoch
        sampler: Any = getattr(self._train_dataloader, "sampler", None)
        inner: Any = getattr(getattr(self._train_dataloader, "batch_sampler", None), "sampler", None)
        samplers: list[Any] = [sampler] if inner is sampler else [sampler, inner]
        for smp in samplers:
            if callable(getattr(smp, "set_epoch", None)):
                smp.set_epoch(epoch)  # shuffling samplers draw a new order per epoch
        self.results.reset()
        self.results.sync = trainer.strategy.sync_metric  # sync_dist=True reduces across processes
        trainer._results = self.results
        trainer._metrics.epoch_end = False
        trainer._progress.batch_idx = 0
        trainer._hooks.call_callbacks("on_train_epoch_start")
        trainer._hooks.call_module("on_train_epoch_start")

    def on_advance_end(self, hooks: bool = True) -> None:
        """End of an epoch; ``hooks=False`` when resuming from a checkpoint written in on_train_epoch_end."""
        trainer = self.trainer
        trainer._results = self.results
        self.phase = "epoch_end"
        if hooks:
            dispatch = trainer._hooks
            trainer._metrics.epoch_end = True  # from here on, reads of callback_metrics see epoch aggregates
            self.results.reduce_epoch()  # sync_dist values reduced here, where every rank is
            if self.epoch_loop._collect_outputs:  # the 1.x hook, only when overridden: outputs cost memory
                dispatch.call_module("training_epoch_end", self.epoch_loop.epoch_end_outputs())
            dispatch.call_callbacks("on_train_epoch_end", monitoring=False)
            dispatch.call_module("on_train_epoch_end")
            dispatch.call_callbacks("on_train_epoch_end", monitoring=True)
            trainer._metrics.on_train_epoch_end(self.results)
        trainer._agree_to_stop()
        if not hooks or self.epoch_loop.num_ready_batches_reached():
            self.epoch_loop.update_lr_schedulers("epoch", plateau=True)
        trainer._progress.current_epoch += 1
        self.phase = "idle"  # at an epoch boundary: a checkpoint written now resumes with the next epoch

    def on_run_end(self) -> None:
        trainer = self.trainer
        self.phase = "idle"
        trainer._hooks.call_callbacks("on_train_end")
        trainer._hooks.call_module("on_train_end")

    def teardown(self) -> None:
        self._train_dataloader = None

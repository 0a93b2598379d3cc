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
            optimizer_step(closure)  -> closure: training_step, [on_before_zero_grad, optimizer_zero_grad
                                        on the first batch of a window], on_before_backward, backward,
                                        on_after_backward; then on_before_optimizer_step,
                                        configure_gradient_clipping, optimizer.step
                                     (batches inside an accumulation window run the closure only)
            [lr_scheduler_step for 'step' schedulers; 'epoch' ones on the epoch's last batch]
            on_train_batch_end
            [validation run: on_validation_model_zero_grad, on_validation_model_eval, on_validation_start,
             on_validation_epoch_start, per batch: on_validation_batch_start, validation_step,
             on_validation_batch_end; on_validation_epoch_end, on_validation_end, on_validation_model_train]
        on_train_epoch_end  (callbacks, module, then monitoring callbacks: EarlyStopping, checkpoints)
    on_train_end
    on_fit_end, teardown("fit")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.loops.fetcher import PrefetchIterator
from fulmen.loops.training_epoch import TrainingEpochLoop
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
        if trainer.should_stop and self.can_stop_early:
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
        while not self.done:
            self.on_advance_start()
            self.epoch_loop.run(self._make_iterator())
            self.on_advance_end()
        if self._stop_reason:
            rank_zero_info(f"`Trainer.fit` stopped: {self._stop_reason}.")
        self.on_run_end()

    def _make_iterator(self) -> PrefetchIterator:
        return PrefetchIterator(self._train_dataloader, self.max_batches)

    def on_run_start(self) -> None:
        trainer = self.trainer
        trainer._hooks.call_callbacks("on_train_start")
        trainer._hooks.call_module("on_train_start")

    def on_advance_start(self) -> None:
        trainer = self.trainer
        self.setup_data()
        epoch = trainer.current_epoch
        sampler: Any = getattr(self._train_dataloader, "sampler", None)
        inner: Any = getattr(getattr(self._train_dataloader, "batch_sampler", None), "sampler", None)
        samplers: list[Any] = [sampler] if inner is sampler else [sampler, inner]
        for smp in samplers:
            if callable(getattr(smp, "set_epoch", None)):
                smp.set_epoch(epoch)  # shuffling samplers draw a new order per epoch
        self.results.reset()
        trainer._results = self.results
        trainer._metrics.epoch_end = False
        trainer._progress.batch_idx = 0
        trainer._hooks.call_callbacks("on_train_epoch_start")
        trainer._hooks.call_module("on_train_epoch_start")

    def on_advance_end(self) -> None:
        trainer = self.trainer
        hooks = trainer._hooks
        trainer._results = self.results
        trainer._metrics.epoch_end = True  # from here on, reads of callback_metrics see epoch aggregates
        hooks.call_callbacks("on_train_epoch_end", monitoring=False)
        hooks.call_module("on_train_epoch_end")
        hooks.call_callbacks("on_train_epoch_end", monitoring=True)
        trainer._metrics.on_train_epoch_end(self.results)
        if self.epoch_loop.num_ready_batches_reached():
            self.epoch_loop.update_lr_schedulers("epoch", plateau=True)
        trainer._progress.current_epoch += 1

    def on_run_end(self) -> None:
        trainer = self.trainer
        trainer._hooks.call_callbacks("on_train_end")
        trainer._hooks.call_module("on_train_end")

    def teardown(self) -> None:
        self._train_dataloader = None

"""How logged values reach callbacks, loggers and the progress bar: ``MetricsHub``.

Values stay tensors on the device they were logged on; dict updates hold references (no sync). Loggers get
Python numbers only every ``log_every_n_steps`` and at epoch ends, the progress bar when it redraws.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from fulmen.runtime.results import ResultCollection, to_scalars

if TYPE_CHECKING:
    from fulmen.runtime.context import RunContext


class MetricsHub:
    """The trainer's view of logged values: ``callback_metrics``, ``logged_metrics``, ``progress_bar_metrics``.

    Dict updates hold tensor references (no sync); loggers get Python numbers only every
    ``log_every_n_steps`` and at epoch ends.
    """

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.epoch_end = False
        self.callback: dict[str, Any] = {}
        self.logged: dict[str, Any] = {}
        self.pbar: dict[str, Any] = {}
        self._eval_steps: dict[tuple[str, int], int] = {}

    def reset(self) -> None:
        self.callback = {}
        self.logged = {}
        self.pbar = {}

    def start_run(self) -> None:
        """A new fit / validate / test / predict: no metrics yet, and evaluation steps count from 0 again
        (within a fit they go on across its validation runs: the x axis of the loggers)."""
        self.reset()
        self._eval_steps = {}

    def current_callback_metrics(self) -> dict[str, Any]:
        self.refresh()
        return self.callback

    def current_pbar_metrics(self) -> dict[str, Any]:
        self.refresh()
        return self.pbar

    def refresh(self) -> None:
        """Bring the views up to date with the running collection (a read: it never communicates)."""
        results = self.context.results
        if results is not None and results.items:
            callback, _, pbar = results.metrics(epoch=self.epoch_end, reading=True)
            self.callback.update(callback)
            self.pbar.update(pbar)

    # -- write points ------------------------------------------------------------------------------------
    def _update(self, results: ResultCollection, epoch: bool) -> dict[str, Any]:
        callback, log, pbar = results.metrics(epoch=epoch)
        self.callback.update(callback)
        self.pbar.update(pbar)
        return log

    def should_log_step(self) -> bool:
        """Whether step values reach the loggers after the running batch (every ``log_every_n_steps``)."""
        context = self.context
        every = context.config.log_every_n_steps
        step = context.progress.batches_that_stepped + 1
        return (every > 0 and step % every == 0) or context.stop.should_stop

    def on_train_step_end(self, results: ResultCollection) -> None:
        """Nothing is copied per step: readers (``callback_metrics``, the progress bar) look at the running
        collection, and the views catch up before a validation run and at the epoch end. Only a step whose
        values go to the loggers reads them here."""
        if results.items and self.context.loggers and self.should_log_step():
            log = self._update(results, epoch=False)
            if log:
                self.log_metrics(log, step=self.context.progress.batches_that_stepped)

    def on_train_epoch_end(self, results: ResultCollection) -> None:
        if not results.items:
            return
        log = self._update(results, epoch=True)
        if log:
            # the epoch's values share the step of its last batch
            self.log_metrics(log, step=self.context.progress.batches_that_stepped - 1)

    def on_eval_step_end(self, results: ResultCollection) -> None:
        if not results.items:
            return
        state = self.context.state
        callback, log, pbar = results.metrics(epoch=False)
        if not callback:
            return
        self.callback.update(callback)
        self.pbar.update(pbar)
        # each dataloader counts its own steps, continued across a fit's validation runs (Lightning's x axis)
        key = (state.stage.value if state.stage is not None else "eval", results.dataloader_idx or 0)
        step = self._eval_steps.get(key, 0)
        self._eval_steps[key] = step + 1
        if log and not state.sanity_checking:
            # the running dataloader's values only: an earlier loader's last step is not logged again
            current = {r.meta.step_name for r in results.items.values()
                       if r.meta.dataloader_idx in (None, results.dataloader_idx)}  # fmt: skip
            log = {k: v for k, v in log.items() if k in current}
            if log:
                self.log_metrics(log, step=step, with_epoch=False)

    def on_eval_epoch_end(self, results: ResultCollection, num_dataloaders: int) -> list[dict[str, float]]:
        state = self.context.state
        callback, log, pbar = results.metrics(epoch=True)
        # an evaluation's step values (`name_step`, or `name` logged on_step only) are not kept for callbacks:
        # monitoring a validation step value is never what is meant (Lightning drops them too)
        for result in results.items.values():
            if result.meta.on_step:
                self.callback.pop(result.meta.step_name, None)
        self.callback.update(callback)
        self.pbar.update(pbar)
        self.log_eval_end_metrics(log)
        outputs: list[dict[str, float]] = []
        if state.sanity_checking:
            return outputs
        # each dataloader's results hold what was logged while it ran (also under add_dataloader_idx=False)
        for idx in range(num_dataloaders):
            per_dl = {
                r.meta.epoch_name: callback[r.meta.epoch_name] for r in results.items.values()
                if r.meta.on_epoch and r.meta.logger and r.meta.epoch_name in callback
                and (r.meta.dataloader_idx is None or r.meta.dataloader_idx == idx)
            }  # fmt: skip
            outputs.append(to_scalars(per_dl))
        return outputs

    def log_eval_end_metrics(self, metrics: dict[str, Any]) -> None:
        """An evaluation epoch's values, to the loggers in one call (none from the sanity check): at a fit's
        training step, else at the step the values carry (``step``) or the last one trained."""
        state = self.context.state
        if not metrics or state.sanity_checking:
            return
        self.log_metrics(metrics, step=self.context.progress.batches_that_stepped if state.fitting else None)

    @property
    def should_update_logs(self) -> bool:
        """Lightning's name for :meth:`should_log_step` (callbacks read it as ``trainer._logger_connector.
        should_update_logs`` to log only when the loggers will write)."""
        return self.should_log_step()

    def log_metrics(self, metrics: dict[str, Any], step: int | None = None, with_epoch: bool = True) -> None:
        """Send metrics to every logger; converts tensors to numbers (a host-device sync point). ``with_epoch``:
        add the current epoch (not to an evaluation step's values, whose x axis is their own step)."""
        context = self.context
        scalars = to_scalars(metrics)
        if step is None:
            step = int(scalars.pop("step", context.progress.batches_that_stepped))
        # trainer.logged_metrics holds tensors, as Lightning's does (the loggers get the numbers)
        self.logged.update({k: torch.tensor(v) for k, v in scalars.items()})
        if not context.loggers:
            return
        if with_epoch:
            scalars.setdefault("epoch", context.progress.current_epoch)
        for logger in context.loggers:
            logger.log_metrics(metrics=scalars, step=step)
            logger.save()

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """The three views, detached on the CPU (to carry them across processes)."""
        return {name: {k: v.detach().cpu() if isinstance(v, torch.Tensor) else v for k, v in view.items()}
                for name, view in (("callback", self.current_callback_metrics()), ("logged", self.logged),
                                   ("pbar", self.pbar))}  # fmt: skip

    def restore(self, snapshot: dict[str, dict[str, Any]]) -> None:
        self.callback, self.logged, self.pbar = snapshot["callback"], snapshot["logged"], snapshot["pbar"]

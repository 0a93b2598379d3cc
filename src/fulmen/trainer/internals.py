"""Lightning's private trainer objects, as views of fulmen's own state.

Libraries and callbacks written against Lightning's trainer internals drive them: optuna-integration asks
``trainer._accelerator_connector.is_distributed``; finetuning-scheduler restores the best checkpoint of each
fine-tuning phase through ``trainer._checkpoint_connector``, orders the callbacks it adds with
``trainer._callback_connector._reorder_callbacks`` and reads how a monitored key is reduced from
``trainer._results``; tests written for Lightning attach and prepare data through ``trainer._data_connector``.
Each name here answers from the one place fulmen keeps that state; fulmen's own code never
goes through them, except the steps of a stage under Lightning's names (``_fit_impl``, ``_validate_impl``,
``_test_impl``, ``_predict_impl``, ``_run_stage``): ``fit`` / ``validate`` / ``test`` / ``predict`` run through
them, so a test that patches one replaces that step.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from fulmen.runtime.state import TrainerFn
from fulmen.trainer.connectors.accelerator_connector import _AcceleratorConnector
from fulmen.trainer.connectors.callback_connector import _CallbackConnector
from fulmen.trainer.connectors.data_connector import _DataConnector
from fulmen.trainer.connectors.signal_connector import _SignalConnector

if TYPE_CHECKING:
    from fulmen.core.datamodule import LightningDataModule
    from fulmen.core.module import LightningModule
    from fulmen.runtime.context import RunContext
    from fulmen.runtime.metrics import MetricsHub
    from fulmen.runtime.results import ResultCollection
    from fulmen.trainer.checkpointing import CheckpointConnector
    from fulmen.trainer.runner import StageRunner
    from fulmen.trainer.trainer import Trainer


class LightningInternals:
    """The Trainer's Lightning-internal names (a base class of :class:`~fulmen.trainer.trainer.Trainer`)."""

    _context: RunContext
    _runner: StageRunner

    @functools.cached_property
    def _accelerator_connector(self) -> _AcceleratorConnector:
        """The flags and the choices made from them (one object per Trainer: what a library sets on it stays)."""
        return _AcceleratorConnector.of_trainer(cast("Trainer", self))

    @functools.cached_property
    def _callback_connector(self) -> _CallbackConnector:
        return _CallbackConnector(cast("Trainer", self))

    @property
    def _checkpoint_connector(self) -> CheckpointConnector:
        """Restores a checkpoint step by step, the object the stage runner restores ``ckpt_path`` with."""
        return self._runner.checkpoints

    @functools.cached_property
    def _data_connector(self) -> _DataConnector:
        """Attaches and prepares the data, and injects the distributed sampler, through the trainer's data source."""
        return _DataConnector(cast("Trainer", self))

    def _teardown(self) -> None:
        """Give back what the last run holds (its teardown hooks are not called)."""
        self._runner.release()

    @property
    def _signal_connector(self) -> _SignalConnector:
        """The signal handlers of a fit (installed when it starts, restored when it ends)."""
        return cast("_SignalConnector", self._runner.signals)

    @property
    def _logger_connector(self) -> MetricsHub:
        """Where logged values go to loggers, callbacks and the progress bar (``should_update_logs``,
        ``log_metrics``, ``log_eval_end_metrics`` ...)."""
        return self._context.metrics

    @property
    def _results(self) -> ResultCollection | None:
        """Where ``self.log`` writes at this moment (``None`` outside a run)."""
        return self._context.results

    # What ``fit`` / ``validate`` / ``test`` / ``predict`` run in each process of the stage (the strategy's launcher
    # starts them, or this one), with the entry point's arguments already checked and its model and data module
    # attached; Lightning's names and parameters, which programs' and libraries' tests patch (``mock.patch(
    # "lightning.pytorch.Trainer._fit_impl")`` to assert what a CLI would have fitted, without fitting).
    def _fit_impl(
        self, model: LightningModule, train_dataloaders: Any = None, val_dataloaders: Any = None,
        datamodule: LightningDataModule | None = None, ckpt_path: str | Path | None = None,
        weights_only: bool | None = None,
    ) -> None:  # fmt: skip
        self._context.data.attach(train=train_dataloaders, val=val_dataloaders)
        self._runner.run(model, TrainerFn.FITTING, ckpt_path, weights_only)

    def _validate_impl(
        self, model: LightningModule, dataloaders: Any = None, ckpt_path: str | Path | None = None,
        verbose: bool = True, datamodule: LightningDataModule | None = None, weights_only: bool | None = None,
    ) -> list[dict[str, float]]:  # fmt: skip
        return self._evaluate_impl(TrainerFn.VALIDATING, model, dataloaders, ckpt_path, verbose, weights_only)

    def _test_impl(
        self, model: LightningModule, dataloaders: Any = None, ckpt_path: str | Path | None = None,
        verbose: bool = True, datamodule: LightningDataModule | None = None, weights_only: bool | None = None,
    ) -> list[dict[str, float]]:  # fmt: skip
        return self._evaluate_impl(TrainerFn.TESTING, model, dataloaders, ckpt_path, verbose, weights_only)

    def _evaluate_impl(
        self, fn: TrainerFn, model: LightningModule, dataloaders: Any, ckpt_path: str | Path | None, verbose: bool,
        weights_only: bool | None,
    ) -> list[dict[str, float]]:  # fmt: skip
        self._context.data.attach(**{"val" if fn == TrainerFn.VALIDATING else "test": dataloaders})
        result: list[dict[str, float]] = self._runner.run(model, fn, ckpt_path, weights_only, verbose)
        return result

    def _predict_impl(
        self, model: LightningModule, dataloaders: Any = None, datamodule: LightningDataModule | None = None,
        return_predictions: bool | None = None, ckpt_path: str | Path | None = None, weights_only: bool | None = None,
    ) -> Any:  # fmt: skip
        self._context.data.attach(predict=dataloaders)
        keep = True if return_predictions is None else return_predictions
        return self._runner.run(model, TrainerFn.PREDICTING, ckpt_path, weights_only, return_predictions=keep)

    def _run_stage(self) -> Any:
        """The running stage's loop, once set up: fit's (its sanity check included), the evaluation's or the
        prediction's; returns what the stage returns."""
        return self._runner.run_loop()

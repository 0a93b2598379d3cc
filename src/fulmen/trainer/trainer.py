"""The ``Trainer``: the public entry points (fit / validate / test / predict) and what users read of a run.

Construction validates every flag (``trainer/flags.py``), picks the strategy (``strategies/factory.py``)
and builds the callbacks and loggers the flags imply (``trainer/connectors/``). The run's state lives in
one :class:`~fulmen.runtime.context.RunContext` (``trainer.run_context``), which the loops receive; the
properties read it (the read-only ones in ``trainer/properties.py``, a base class; those users may also assign
below). A stage runs through :class:`~fulmen.trainer.runner.StageRunner`.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from fulmen.accelerators import Accelerator
from fulmen.core.configure_optimizers import LRSchedulerConfig
from fulmen.core.datamodule import LightningDataModule
from fulmen.core.hooks import Callback
from fulmen.core.module import LightningModule
from fulmen.loops.evaluation_loop import EvaluationLoop, PredictionLoop
from fulmen.loops.fit_loop import FitLoop
from fulmen.precision import Precision
from fulmen.runtime.context import RunContext
from fulmen.runtime.data import split_datamodule
from fulmen.runtime.results import to_scalars as to_scalars  # importable from here as before the split
from fulmen.runtime.state import RunningStage, TrainerFn, TrainerStatus
from fulmen.runtime.state import TrainerState as TrainerState  # Lightning's module holds it
from fulmen.strategies.parallel import ParallelStrategy as ParallelStrategy  # and this
from fulmen.strategies.strategy import Strategy
from fulmen.trainer import call as _call
from fulmen.trainer._lightning_names import trainer_module_getattr as __getattr__  # noqa: F401
from fulmen.trainer.checkpointing import eval_ckpt_path, select_ckpt_path
from fulmen.trainer.connectors import build_callbacks, build_loggers, prepare_model
from fulmen.trainer.connectors.accelerator_connector import choose_strategy
from fulmen.trainer.connectors.signal_connector import _SignalConnector
from fulmen.trainer.flags import ConfigField, TrainerConfig, parse_flags
from fulmen.trainer.internals import LightningInternals
from fulmen.trainer.properties import TrainerProperties
from fulmen.trainer.runner import StageRunner
from fulmen.trainer.states import StageFlag
from fulmen.utilities.argparse import _defaults_from_env_vars
from fulmen.utilities.exceptions import InvalidTypeError, MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn

if TYPE_CHECKING:
    from collections.abc import Iterable

    from fulmen.loggers.logger import Logger
    from fulmen.profilers import Profiler


class Trainer(TrainerProperties, LightningInternals):
    """Runs a LightningModule: ``fit``, ``validate``, ``test`` and ``predict``.

    Arguments mirror ``lightning.pytorch.Trainer`` (same names and defaults); every flag is validated when
    the Trainer is made, before anything runs (see :class:`~fulmen.trainer.flags.TrainerConfig`).
    """

    @_defaults_from_env_vars  # PL_TRAINER_<FLAG> sets a flag the code leaves out (cluster jobs, CI matrices)
    def __init__(
        self,
        *,
        accelerator: str | Accelerator = "auto",
        strategy: str | Strategy = "auto",
        devices: list[int] | str | int = "auto",
        num_nodes: int = 1,
        precision: int | str | None = None,
        logger: Logger | Iterable[Logger] | bool | None = None,
        callbacks: list[Callback] | Callback | None = None,
        fast_dev_run: int | bool = False,
        max_epochs: int | None = None,
        min_epochs: int | None = None,
        max_steps: int = -1,
        min_steps: int | None = None,
        max_time: str | datetime.timedelta | dict[str, int] | None = None,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        overfit_batches: int | float = 0.0,
        val_check_interval: int | float | str | datetime.timedelta | dict[str, int] | None = None,
        check_val_every_n_epoch: int | None = 1,
        num_sanity_val_steps: int | None = None,
        log_every_n_steps: int | None = None,
        enable_checkpointing: bool | None = None,
        enable_progress_bar: bool | None = None,
        enable_model_summary: bool | None = None,
        accumulate_grad_batches: int | dict[int, int] = 1,
        gradient_clip_val: int | float | None = None,
        gradient_clip_algorithm: str | None = None,
        deterministic: bool | str | None = None,
        benchmark: bool | None = None,
        inference_mode: bool = True,
        use_distributed_sampler: bool = True,
        profiler: Profiler | str | None = None,
        detect_anomaly: bool = False,
        barebones: bool = False,
        plugins: Any = None,
        sync_batchnorm: bool = False,
        reload_dataloaders_every_n_epochs: int = 0,
        default_root_dir: str | Path | None = None,
        enable_autolog_hparams: bool = True,
        model_registry: str | None = None,
        matmul_precision: str | None = None,
        compile: bool | dict[str, Any] = False,
        auto_scale_batch_size: bool | str | None = None,
        auto_lr_find: bool | str = False,
        stochastic_weight_avg: bool = False,
    ) -> None:
        config = parse_flags({k: v for k, v in locals().items() if k != "self"})
        self._context = context = RunContext(self, config, _strategy_for(config))
        self._make_loops(context)
        self._runner = StageRunner(self, context, _SignalConnector(self, context.stop))
        self.predictions: Any = None
        self._managed_ckpt_path: str | Path | None = None  # `trainer.ckpt_path = ...` (see checkpointing.py)
        context.callbacks = build_callbacks(config)
        context.loggers = build_loggers(config, self.default_root_dir)

    def _make_loops(self, context: RunContext) -> None:
        """The stage loops, on the run's context (fit's loop runs validation through ``validate_loop``)."""
        self.validate_loop = EvaluationLoop(context, "validation")
        self.test_loop = EvaluationLoop(context, "test")
        self.predict_loop = PredictionLoop(context)
        self.fit_loop = FitLoop(context, self.validate_loop)

    # -- what users may assign, and what the strategy, flags, callbacks and loaders show --------------------
    @property
    def datamodule(self) -> LightningDataModule | None:
        return self._context.datamodule

    @datamodule.setter
    def datamodule(self, datamodule: LightningDataModule | None) -> None:
        # assignable, as in Lightning (its tests attach one this way); the next stage's argument replaces it
        self._context.datamodule = datamodule

    @property
    def callbacks(self) -> list[Callback]:
        # the context names them by what the run reads (runtime.protocols); the trainer put Callbacks there, in
        # a list (the constructor, the setter, configure_callbacks)
        return cast("list[Callback]", self._context.callbacks)

    @callbacks.setter
    def callbacks(self, callbacks: list[Callback]) -> None:
        self._context.callbacks = list(callbacks)
        self._context.hooks.reset()

    @property
    def loggers(self) -> list[Any]:
        return cast("list[Any]", self._context.loggers)  # a list: see callbacks

    @loggers.setter
    def loggers(self, loggers: list[Any] | None) -> None:
        self._context.loggers = list(loggers) if loggers else []

    @property
    def logger(self) -> Any:
        return self.loggers[0] if self.loggers else None

    @logger.setter
    def logger(self, logger: Any) -> None:
        self.loggers = [logger] if logger is not None else []

    @property
    def should_stop(self) -> bool:
        return self._context.stop.should_stop

    @should_stop.setter
    def should_stop(self, value: bool) -> None:
        self._context.stop.should_stop = value

    @property
    def precision(self) -> str:
        return self.strategy.precision_plugin.name

    @property
    def precision_plugin(self) -> Precision:
        return self.strategy.precision_plugin

    @property
    def model(self) -> torch.nn.Module | None:
        return self.strategy.model

    @property
    def optimizers(self) -> list[torch.optim.Optimizer]:
        return self.strategy.optimizers

    @optimizers.setter
    def optimizers(self, optimizers: list[torch.optim.Optimizer]) -> None:
        self.strategy.set_optimizers(list(optimizers))
        module = self.lightning_module
        self.fit_loop.epoch_loop.manual.count_steps(manual=module is not None and not module.automatic_optimization)

    @property
    def lr_scheduler_configs(self) -> list[LRSchedulerConfig]:
        return self.strategy.lr_scheduler_configs

    @lr_scheduler_configs.setter
    def lr_scheduler_configs(self, configs: list[LRSchedulerConfig]) -> None:
        self.strategy.lr_scheduler_configs = configs

    @property
    def optimizer_frequencies(self) -> list[int]:
        return self.strategy.optimizer_frequencies

    @property
    def accumulate_grad_batches(self) -> int:
        """Batches per optimizer step. Set by ``Trainer(accumulate_grad_batches=...)``; during fit a
        ``GradientAccumulationScheduler`` changes it, and each fit starts again from the Trainer's value."""
        return self._context.accumulate_grad_batches

    @accumulate_grad_batches.setter
    def accumulate_grad_batches(self, value: int) -> None:
        context = self._context
        context.accumulate_grad_batches = value
        if not (context.state.fitting and context.state.status == TrainerStatus.RUNNING):
            context.config = replace(context.config, accumulate_grad_batches=value)  # where the next fit starts

    # the flags users read back (typed, read-only)
    @property
    def max_epochs(self) -> int | None:
        return self.config.given_max_epochs(self._context.max_epochs_default_applied)
    min_epochs: ConfigField[int | None] = ConfigField()
    max_steps: ConfigField[int] = ConfigField()
    min_steps: ConfigField[int | None] = ConfigField()
    max_time: ConfigField[datetime.timedelta | None] = ConfigField()
    gradient_clip_val: ConfigField[int | float | None] = ConfigField()
    gradient_clip_algorithm: ConfigField[str | None] = ConfigField()
    log_every_n_steps: ConfigField[int] = ConfigField()
    val_check_interval: ConfigField[int | float | datetime.timedelta] = ConfigField()
    check_val_every_n_epoch: ConfigField[int | None] = ConfigField()
    num_sanity_val_steps: ConfigField[int | float] = ConfigField()
    fast_dev_run: ConfigField[int | bool] = ConfigField()
    limit_train_batches: ConfigField[int | float] = ConfigField()
    limit_val_batches: ConfigField[int | float] = ConfigField()
    limit_test_batches: ConfigField[int | float] = ConfigField()
    limit_predict_batches: ConfigField[int | float] = ConfigField()
    reload_dataloaders_every_n_epochs: ConfigField[int] = ConfigField()
    num_nodes: ConfigField[int] = ConfigField()
    barebones: ConfigField[bool] = ConfigField()
    sync_batchnorm: ConfigField[bool] = ConfigField()
    use_distributed_sampler: ConfigField[bool] = ConfigField()
    enable_autolog_hparams: ConfigField[bool] = ConfigField()
    auto_scale_batch_size: ConfigField[str | None] = ConfigField()
    auto_lr_find: ConfigField[bool | str] = ConfigField()
    overfit_batches: ConfigField[int | float] = ConfigField()
    profiler: ConfigField[Profiler] = ConfigField()  # a PassThroughProfiler for profiler=None

    # whether that stage is running; setting True enters it, False leaves it (callbacks and tests set them)
    training = StageFlag(RunningStage.TRAINING)
    sanity_checking = StageFlag(RunningStage.SANITY_CHECKING)
    validating = StageFlag(RunningStage.VALIDATING)
    testing = StageFlag(RunningStage.TESTING)
    predicting = StageFlag(RunningStage.PREDICTING)

    @property
    def scaler(self) -> Any:  # the precision's GradScaler, None when it uses none
        return getattr(self.precision_plugin, "scaler", None)

    @property
    def default_root_dir(self) -> str:
        root = self.config.default_root_dir
        return root if root is not None else os.getcwd()

    @property
    def log_dir(self) -> str | None:
        if not self.loggers:
            return self.default_root_dir
        logger = self.loggers[0]
        return getattr(logger, "log_dir", None) or logger.save_dir or self.default_root_dir

    @property
    def progress_bar_callback(self) -> Callback | None:
        from fulmen.callbacks.progress import ProgressBar

        return next((cb for cb in self.callbacks if isinstance(cb, ProgressBar)), None)

    @property
    def early_stopping_callback(self) -> Callback | None:
        callbacks = self.early_stopping_callbacks
        return callbacks[0] if callbacks else None

    @property
    def early_stopping_callbacks(self) -> list[Callback]:
        from fulmen.callbacks.early_stopping import EarlyStopping

        return [cb for cb in self.callbacks if isinstance(cb, EarlyStopping)]

    @property
    def checkpoint_callbacks(self) -> list[Callback]:
        return [cb for cb in self.callbacks if getattr(cb, "_is_checkpoint_callback", False)]

    @property
    def checkpoint_callback(self) -> Callback | None:
        callbacks = self.checkpoint_callbacks
        return callbacks[0] if callbacks else None

    @property
    def train_dataloader(self) -> Any:
        shown = self._context.data.shown.get("train")  # left by the batch-size finder until a run loads its own
        return shown if shown is not None else self.fit_loop.train_dataloader

    @property
    def val_dataloaders(self) -> Any:
        return self._context.data.stage_dataloaders("val")

    @property
    def test_dataloaders(self) -> Any:
        return self._context.data.stage_dataloaders("test")

    @property
    def predict_dataloaders(self) -> Any:
        return self._context.data.stage_dataloaders("predict")

    @property
    def ckpt_path(self) -> str | os.PathLike[str] | None:
        """The checkpoint the last run loaded (``None``: the model's own weights), or the one set for later runs."""
        return self._managed_ckpt_path or self._runner.checkpoints.ckpt_path

    @ckpt_path.setter
    def ckpt_path(self, ckpt_path: str | Path | None) -> None:
        """Later stages called without ``ckpt_path`` load this checkpoint, until it is set to ``None``."""
        self._managed_ckpt_path = ckpt_path
        self._runner.checkpoints.resume_start(None)  # forgets the file the last run read

    # -- entry points ---------------------------------------------------------------------------------------
    def fit(
        self,
        model: LightningModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: LightningDataModule | None = None,
        ckpt_path: str | Path | None = None,
        weights_only: bool | None = None,
    ) -> None:
        """Train ``model``; validation runs as ``val_check_interval`` / ``check_val_every_n_epoch`` say.

        ``ckpt_path`` (a file, ``"last"`` or ``"best"``) resumes a run exactly where its checkpoint was written.
        Checkpoints load with ``weights_only=True`` unless you pass ``weights_only=False`` for a trusted file.
        """
        train_dataloaders, datamodule = split_datamodule(train_dataloaders, datamodule)
        if datamodule is not None and (train_dataloaders is not None or val_dataloaders is not None):
            raise MisconfigurationException("trainer.fit() got both dataloaders and a datamodule. Pass one or the other.")
        ckpt_path = select_ckpt_path(self, ckpt_path)
        model = self._attach(model, datamodule, TrainerFn.FITTING)
        args = (model, train_dataloaders, val_dataloaders, datamodule, ckpt_path, weights_only)
        _call._call_and_handle_interrupt(self, self._fit_impl, *args)

    def validate(
        self,
        model: LightningModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | Path | None = None,
        verbose: bool = True,
        datamodule: LightningDataModule | None = None,
        weights_only: bool | None = None,
    ) -> list[dict[str, float]]:
        """Run one validation epoch; returns the epoch metrics per dataloader."""
        return self._evaluate(model, dataloaders, ckpt_path, verbose, datamodule, TrainerFn.VALIDATING, weights_only)

    def test(
        self,
        model: LightningModule | None = None,
        dataloaders: Any = None,
        ckpt_path: str | Path | None = None,
        verbose: bool = True,
        datamodule: LightningDataModule | None = None,
        weights_only: bool | None = None,
    ) -> list[dict[str, float]]:
        """Run one test epoch; returns the epoch metrics per dataloader."""
        return self._evaluate(model, dataloaders, ckpt_path, verbose, datamodule, TrainerFn.TESTING, weights_only)

    def predict(
        self,
        model: LightningModule | None = None,
        dataloaders: Any = None,
        datamodule: LightningDataModule | None = None,
        return_predictions: bool | None = None,
        ckpt_path: str | Path | None = None,
        weights_only: bool | None = None,
    ) -> Any:
        """Run ``predict_step`` over the predict dataloaders; returns the outputs (a list per dataloader)."""
        dataloaders, datamodule = split_datamodule(dataloaders, datamodule)
        ckpt_path = eval_ckpt_path(self, model, ckpt_path)  # before attaching: None means "not given"
        model = self._attach(model, datamodule, TrainerFn.PREDICTING)
        args = (model, dataloaders, datamodule, return_predictions, ckpt_path, weights_only)
        return _call._call_and_handle_interrupt(self, self._predict_impl, *args)

    def _evaluate(
        self, model: LightningModule | None, dataloaders: Any, ckpt_path: Any, verbose: bool,
        datamodule: LightningDataModule | None, fn: TrainerFn, weights_only: bool | None,
    ) -> list[dict[str, float]]:  # fmt: skip
        dataloaders, datamodule = split_datamodule(dataloaders, datamodule)
        ckpt_path = eval_ckpt_path(self, model, ckpt_path)
        model = self._attach(model, datamodule, fn)
        impl = self._validate_impl if fn == TrainerFn.VALIDATING else self._test_impl
        return _call._call_and_handle_interrupt(self, impl, model, dataloaders, ckpt_path, verbose, datamodule, weights_only)

    def tune(
        self, model: LightningModule, train_dataloaders: Any = None, val_dataloaders: Any = None,
        datamodule: LightningDataModule | None = None, scale_batch_size_kwargs: dict[str, Any] | None = None,
        lr_find_kwargs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """The 1.x way to tune: what ``Trainer(auto_scale_batch_size=..., auto_lr_find=...)`` asked for, batch
        size first. Returns ``{"scale_batch_size": <size or None>, "lr_find": <LRFinder or None>}``."""
        from fulmen.tuner.tuning import tune_as_flags_ask

        train_dataloaders, datamodule = split_datamodule(train_dataloaders, datamodule)
        loaders = {"train_dataloaders": train_dataloaders, "val_dataloaders": val_dataloaders, "datamodule": datamodule}
        return tune_as_flags_ask(self, model, loaders, scale_batch_size_kwargs or {}, lr_find_kwargs or {})

    def save_checkpoint(
        self, filepath: str | Path, weights_only: bool | None = None, storage_options: Any = None
    ) -> None:
        """Write a checkpoint through the strategy's ``CheckpointIO`` (atomically; a local path or an fsspec URL;
        a ``.safetensors`` path exports the weights only). Without a model: an AttributeError, as in Lightning."""
        from fulmen.trainer.checkpointing import save_checkpoint

        self._context.ticks += 1  # a save is progress too (the hang watchdog's count)
        save_checkpoint(self, filepath, weights_only=bool(weights_only), storage_options=storage_options)
        self._context.ticks += 1
        self.strategy.barrier("Trainer.save_checkpoint")

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self.is_global_zero:
            print(*args, **kwargs)

    # -- the run ---------------------------------------------------------------------------------------
    def _attach(
        self, model: LightningModule | None, datamodule: LightningDataModule | None, fn: TrainerFn
    ) -> LightningModule:
        if model is None:
            model = self.lightning_module
            if model is None:
                raise InvalidTypeError(  # a TypeError, as Lightning raises, and a MisconfigurationException
                    f"`trainer.{fn.value}()` requires a `LightningModule`: pass it as the first argument (no "
                    "earlier fit() attached one)."
                )
        model = prepare_model(model, self.config.compile, fn.value)
        if datamodule is not None and not isinstance(datamodule, LightningDataModule):
            raise TypeError(f"datamodule must be a LightningDataModule, got {type(datamodule).__name__}.")
        self._context.datamodule = datamodule
        if datamodule is not None:
            datamodule.trainer = self
        return model

    def init_module(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager[Any]:
        """Build the model inside: on the strategy's device, in the precision's dtype. ``empty_init=True``
        skips initialisation (weights come from a checkpoint); under FSDP it means the meta device, the model
        then materialised already sharded."""
        return self.strategy.tensor_init_context(empty_init=empty_init)


def _strategy_for(config: TrainerConfig) -> Strategy:
    """The strategy the flags choose, using the ``CheckpointIO`` plugin passed, if any."""
    strategy = choose_strategy(config)
    if config.checkpoint_io is not None:
        strategy.use_plugin_checkpoint_io(config.checkpoint_io)
    return strategy


__all__ = ["Trainer"]

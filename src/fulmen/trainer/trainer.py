"""The ``Trainer``: owns the run's state and drives fit / validate / test / predict."""

from __future__ import annotations

import datetime
import inspect
import math
import os
from pathlib import Path
from typing import Any

import torch

from fulmen.accelerators import Accelerator, select_accelerator
from fulmen.callbacks.callback import Callback
from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule, unwrap_compiled
from fulmen.core.optimizers import LRSchedulerConfig, parse_configure_optimizers
from fulmen.loops.evaluation import EvaluationLoop, PredictionLoop
from fulmen.loops.fit import FitLoop
from fulmen.precision import Precision, normalize_precision, select_precision
from fulmen.strategies.ddp import DDPStrategy
from fulmen.strategies.ddp_spawn import DDPSpawnStrategy
from fulmen.strategies.environment import detect as detect_cluster
from fulmen.strategies.strategy import SingleDeviceStrategy, Strategy
from fulmen.trainer.config import parse_loop_flags
from fulmen.trainer.data import TrainerData, step_overridden
from fulmen.trainer.hooks import HookDispatcher
from fulmen.trainer.logging import MetricsHub, ResultCollection, to_scalars
from fulmen.trainer.signals import SignalConnector, SignalInterrupt, slurm_requeued
from fulmen.trainer.state import FitProgress, RunningStage, TrainerFn, TrainerState, TrainerStatus
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

_DDP_STRATEGIES = ("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook")
_NOT_SUPPORTED_STRATEGIES = ("fsdp", "deepspeed", "xla", "hpu_parallel", "single_xla", "single_hpu")


def _ddp_strategy_kind(name: str | None) -> tuple[str, bool] | None:
    """'ddp_spawn_find_unused_parameters_true' → ('ddp_spawn', True); None for names that are not DDP."""
    if name is None:
        return None
    if name in _NOT_SUPPORTED_STRATEGIES:
        raise MisconfigurationException(
            f"strategy={name!r} is not available in fulmen (it trains with DDP on torch.distributed). Use "
            "strategy='ddp'."
        )
    for suffix, find_unused in (
        ("_find_unused_parameters_true", True),
        ("_find_unused_parameters_false", False),
    ):
        if name.endswith(suffix):
            base = name.removesuffix(suffix)
            return (base, find_unused) if base in _DDP_STRATEGIES else None
    return (name, False) if name in _DDP_STRATEGIES else None


class Trainer:
    """Runs a LightningModule: ``fit``, ``validate``, ``test`` and ``predict``.

    Arguments mirror ``lightning.pytorch.Trainer`` (same names and defaults); every flag is validated here,
    before anything runs.
    """

    def __init__(
        self,
        *,
        accelerator: str | Accelerator = "auto",
        strategy: str | Strategy = "auto",
        devices: list[int] | str | int = "auto",
        num_nodes: int = 1,
        precision: Any = None,
        logger: Any = None,
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
        val_check_interval: int | float | None = None,
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
        profiler: Any = None,
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
        # the configuration as given: the tuner builds its trial trainers from it
        self._init_kwargs: dict[str, Any] = {k: v for k, v in locals().items() if k != "self"}
        # -- flags, validated once ------------------------------------------------------------------
        accumulation_scheduler = None
        if isinstance(accumulate_grad_batches, dict):  # the 1.x spelling of a GradientAccumulationScheduler
            from fulmen.callbacks.gradient_accumulation_scheduler import GradientAccumulationScheduler

            accumulation_scheduler = GradientAccumulationScheduler(accumulate_grad_batches)
            accumulate_grad_batches = 1
        self._loop_config = parse_loop_flags(
            fast_dev_run=fast_dev_run, max_epochs=max_epochs, min_epochs=min_epochs, max_steps=max_steps,
            min_steps=min_steps, max_time=max_time, limit_train_batches=limit_train_batches,
            limit_val_batches=limit_val_batches, limit_test_batches=limit_test_batches,
            limit_predict_batches=limit_predict_batches, overfit_batches=overfit_batches,
            val_check_interval=val_check_interval, check_val_every_n_epoch=check_val_every_n_epoch,
            num_sanity_val_steps=num_sanity_val_steps, log_every_n_steps=log_every_n_steps,
            accumulate_grad_batches=accumulate_grad_batches, gradient_clip_val=gradient_clip_val,
            gradient_clip_algorithm=gradient_clip_algorithm,
            reload_dataloaders_every_n_epochs=reload_dataloaders_every_n_epochs,
        )  # fmt: skip
        if barebones:
            _check_barebones(
                logger=logger, enable_checkpointing=enable_checkpointing, enable_progress_bar=enable_progress_bar,
                enable_model_summary=enable_model_summary, log_every_n_steps=log_every_n_steps,
                detect_anomaly=detect_anomaly, profiler=profiler,
            )  # fmt: skip
            logger, enable_checkpointing, enable_progress_bar, enable_model_summary = (
                False,
                False,
                False,
                False,
            )
        self.barebones = barebones
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
            raise MisconfigurationException(f"num_nodes={num_nodes!r} must be an int >= 1.")
        if deterministic not in (None, True, False, "warn"):
            raise MisconfigurationException(
                f"deterministic={deterministic!r} must be True, False, 'warn' or None."
            )
        if not isinstance(inference_mode, bool):
            raise MisconfigurationException(f"inference_mode={inference_mode!r} must be a bool.")
        if matmul_precision is not None and matmul_precision not in _MATMUL_PRECISIONS:
            raise MisconfigurationException(
                f"matmul_precision={matmul_precision!r} is not supported. Use one of {_MATMUL_PRECISIONS} (passed "
                "to torch.set_float32_matmul_precision for the run), or None to leave the setting alone."
            )
        self._matmul_precision = matmul_precision
        if not isinstance(compile, (bool, dict)):
            raise MisconfigurationException(
                f"compile={compile!r} must be True, False or a dict of torch.compile options, e.g. "
                "compile={'mode': 'reduce-overhead'} or compile={'backend': 'inductor', 'dynamic': False}."
            )
        self._compile = compile
        if auto_scale_batch_size not in (None, False, True, "power", "binsearch"):
            raise MisconfigurationException(
                f"auto_scale_batch_size={auto_scale_batch_size!r} must be None/False, True (= 'power'), 'power' or "
                "'binsearch'; trainer.tune(model) then runs the batch-size finder."
            )
        if not isinstance(auto_lr_find, (bool, str)):
            raise MisconfigurationException(
                f"auto_lr_find={auto_lr_find!r} must be True, False, or the name of the module attribute that holds "
                "the learning rate; trainer.tune(model) then runs the learning-rate finder."
            )
        self.auto_scale_batch_size = (
            "power" if auto_scale_batch_size is True else auto_scale_batch_size or None
        )
        self.auto_lr_find = auto_lr_find
        self._precision_flag = normalize_precision(precision)
        self._precision_plugin = _precision_from_plugins(plugins, precision)
        self.accelerator = select_accelerator(accelerator)
        self._devices = self.accelerator.parse_devices(devices)
        self.num_nodes = num_nodes
        self.strategy = self._select_strategy(strategy)
        if profiler is not None:  # said plainly rather than accepted and ignored
            rank_zero_warn(
                f"Trainer(profiler={profiler!r}): fulmen has no profiler of its own; the run is not profiled. Wrap "
                "trainer.fit() in torch.profiler.profile(...) to profile it."
            )
        if model_registry is not None:
            rank_zero_warn(
                f"Trainer(model_registry={model_registry!r}): fulmen uploads nothing to a model registry; the "
                "argument is ignored (checkpoints are written locally)."
            )
        if not isinstance(sync_batchnorm, bool):
            raise MisconfigurationException(f"sync_batchnorm={sync_batchnorm!r} must be True or False.")
        if sync_batchnorm and isinstance(self.strategy, DDPStrategy) and self.accelerator.name == "cpu":
            raise MisconfigurationException(
                "Trainer(sync_batchnorm=True) turns BatchNorm layers into torch.nn.SyncBatchNorm, which torch runs "
                "on GPUs only, but accelerator='cpu'. Use sync_batchnorm=False on CPUs."
            )
        if sync_batchnorm and not isinstance(self.strategy, DDPStrategy):
            rank_zero_warn(
                "Trainer(sync_batchnorm=True) has no effect with one process (it syncs across DDP ranks)."
            )
        self.sync_batchnorm = sync_batchnorm
        self._deterministic = deterministic
        self._benchmark = benchmark
        self._inference_mode = inference_mode
        self._detect_anomaly = detect_anomaly
        self.use_distributed_sampler = use_distributed_sampler
        self.enable_autolog_hparams = enable_autolog_hparams
        self._default_root_dir = os.fspath(default_root_dir) if default_root_dir is not None else None
        self._enable_checkpointing = enable_checkpointing is not False

        # -- state the trainer owns ---------------------------------------------------------------------
        self.state = TrainerState()
        self._accumulate_grad_batches = self._loop_config.accumulate_grad_batches
        self._progress = FitProgress()
        self.should_stop = False
        self._stop_agreed = False  # should_stop is the same on every rank (see _agree_to_stop)
        self.num_training_batches: int | float = float("inf")
        self.val_check_batch: int | float = float("inf")
        self.num_sanity_val_batches: list[int | float] = []
        self.num_val_batches: list[int | float] = []
        self.num_test_batches: list[int | float] = []
        self.num_predict_batches: list[int | float] = []
        self.lightning_module: LightningModule | None = None  # type: ignore[assignment]
        self.datamodule: LightningDataModule | None = None
        self._results: ResultCollection | None = None
        self._metrics = MetricsHub(self)
        self._hooks = HookDispatcher(self)
        self._data = TrainerData(self)
        self.fit_loop = FitLoop(self)
        self._ckpt_path: str | None = None
        self._ckpt_request: tuple[Any, bool] = (None, True)
        self._signals = SignalConnector(self)
        self.validate_loop = EvaluationLoop(self, "validation")
        self.test_loop = EvaluationLoop(self, "test")
        self.predict_loop = PredictionLoop(self)
        self.lr_scheduler_configs: list[LRSchedulerConfig] = []
        self.optimizer_frequencies: list[int] = []
        self.predictions: Any = None

        # -- callbacks and loggers --------------------------------------------------------------------------
        from fulmen.trainer.connectors import build_callbacks, build_loggers

        self.callbacks: list[Callback] = build_callbacks(
            self, callbacks, enable_progress_bar=enable_progress_bar is not False,
            enable_model_summary=enable_model_summary is not False,
            enable_checkpointing=self._enable_checkpointing,
        )  # fmt: skip
        if accumulation_scheduler is not None:
            if any(isinstance(cb, type(accumulation_scheduler)) for cb in self.callbacks):
                raise MisconfigurationException(
                    "Trainer(accumulate_grad_batches=<dict>) and a GradientAccumulationScheduler in callbacks "
                    "both schedule accumulation. Keep one of them."
                )
            self.callbacks.append(accumulation_scheduler)
        if not isinstance(stochastic_weight_avg, bool):
            raise MisconfigurationException(
                f"stochastic_weight_avg={stochastic_weight_avg!r} must be True or False (True adds "
                "StochasticWeightAveraging() with its defaults; pass the callback itself to choose them)."
            )
        if stochastic_weight_avg and not any(
            type(cb).__name__ == "StochasticWeightAveraging" for cb in self.callbacks
        ):
            from fulmen.callbacks.stochastic_weight_avg import StochasticWeightAveraging

            self.callbacks.append(StochasticWeightAveraging())
        self.loggers = build_loggers(self, logger)

    # -- construction helpers -----------------------------------------------------------------------------
    def _select_strategy(self, strategy: str | Strategy) -> Strategy:
        device = self._devices[0]
        precision_plugin = self._precision_plugin or select_precision(self._precision_flag, device.type)
        if isinstance(strategy, Strategy):
            strategy.accelerator = strategy.accelerator or self.accelerator
            if type(strategy.precision_plugin) is Precision:  # left at the default: use the Trainer's
                strategy.precision_plugin = precision_plugin
            if isinstance(strategy, DDPStrategy):
                strategy.check_launch(self._devices, self.num_nodes, detect_cluster())
            return strategy
        name = strategy.lower() if isinstance(strategy, str) else None
        ddp_kind = _ddp_strategy_kind(name)
        if name not in ("auto", "single_device") and ddp_kind is None:
            raise MisconfigurationException(
                f"strategy={strategy!r} is not supported. Use 'auto', 'single_device', 'ddp', 'ddp_spawn', "
                "'ddp_fork', 'ddp_notebook' (each DDP name also with '_find_unused_parameters_true'), or a "
                "Strategy instance such as DDPStrategy(...)."
            )
        processes = len(self._devices) * self.num_nodes
        cluster = detect_cluster()
        launched = cluster is not None and cluster.world_size > 1
        if ddp_kind is None and name == "auto" and (processes > 1 or launched):
            ddp_kind = ("ddp", False)
        if ddp_kind is not None:
            base, find_unused = ddp_kind
            ddp: DDPStrategy
            if base == "ddp":
                # one device outside a launcher trains exactly like one process: no group needed
                if processes == 1 and cluster is None:
                    return SingleDeviceStrategy(
                        device=device, accelerator=self.accelerator, precision_plugin=precision_plugin
                    )
                ddp = DDPStrategy(accelerator=self.accelerator, precision_plugin=precision_plugin,
                                  find_unused_parameters=find_unused)  # fmt: skip
            else:
                ddp = DDPSpawnStrategy(
                    accelerator=self.accelerator, precision_plugin=precision_plugin, find_unused_parameters=find_unused,
                    start_method="spawn" if base == "ddp_spawn" else "fork",
                )  # fmt: skip
                ddp.strategy_name = base
            ddp.check_launch(self._devices, self.num_nodes, cluster)
            return ddp
        if processes > 1:
            raise MisconfigurationException(
                f"strategy={strategy!r} runs one process, but devices={len(self._devices)} and "
                f"num_nodes={self.num_nodes} ask for {processes}. Use strategy='ddp' (or 'auto'), or devices=1."
            )
        return SingleDeviceStrategy(
            device=device, accelerator=self.accelerator, precision_plugin=precision_plugin
        )

    # -- properties users read ------------------------------------------------------------------------------
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
        self.strategy.setup_optimizers(list(optimizers))
        self._wire_optimizers()

    @property
    def global_step(self) -> int:
        return self._progress.global_step

    @property
    def current_epoch(self) -> int:
        return self._progress.current_epoch

    @property
    def is_last_batch(self) -> bool:
        return self.fit_loop.epoch_loop.is_last_batch

    @property
    def max_epochs(self) -> int:
        return self._loop_config.max_epochs

    @property
    def min_epochs(self) -> int | None:
        return self._loop_config.min_epochs

    @property
    def max_steps(self) -> int:
        return self._loop_config.max_steps

    @property
    def min_steps(self) -> int | None:
        return self._loop_config.min_steps

    @property
    def accumulate_grad_batches(self) -> int:
        """Batches per optimizer step. Set by ``Trainer(accumulate_grad_batches=...)``; during fit a
        ``GradientAccumulationScheduler`` changes it, and each fit starts again from the Trainer's value."""
        return self._accumulate_grad_batches

    @accumulate_grad_batches.setter
    def accumulate_grad_batches(self, value: int) -> None:
        self._accumulate_grad_batches = value
        fitting = self.state.fn == TrainerFn.FITTING and self.state.status == TrainerStatus.RUNNING
        if not fitting:  # outside fit: the new value is where the next fit starts
            self._loop_config.accumulate_grad_batches = value

    @property
    def gradient_clip_val(self) -> int | float | None:
        return self._loop_config.gradient_clip_val

    @property
    def gradient_clip_algorithm(self) -> str | None:
        return self._loop_config.gradient_clip_algorithm

    @property
    def log_every_n_steps(self) -> int:
        return self._loop_config.log_every_n_steps

    @property
    def val_check_interval(self) -> int | float:
        return self._loop_config.val_check_interval

    @property
    def check_val_every_n_epoch(self) -> int | None:
        return self._loop_config.check_val_every_n_epoch

    @property
    def num_sanity_val_steps(self) -> int | float:
        return self._loop_config.num_sanity_val_steps

    @property
    def fast_dev_run(self) -> int | bool:
        return self._loop_config.fast_dev_run

    @property
    def limit_train_batches(self) -> int | float:
        return self._loop_config.limit_train_batches

    @property
    def limit_val_batches(self) -> int | float:
        return self._loop_config.limit_val_batches

    @property
    def limit_test_batches(self) -> int | float:
        return self._loop_config.limit_test_batches

    @property
    def limit_predict_batches(self) -> int | float:
        return self._loop_config.limit_predict_batches

    @property
    def reload_dataloaders_every_n_epochs(self) -> int:
        return self._loop_config.reload_dataloaders_every_n_epochs

    @property
    def max_time(self) -> datetime.timedelta | None:
        return self._loop_config.max_time

    @property
    def callback_metrics(self) -> dict[str, Any]:
        return self._metrics.current_callback_metrics()

    @property
    def logged_metrics(self) -> dict[str, Any]:
        return self._metrics.logged

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """Values shown by the progress bar, as numbers (reading this is a host-device sync point)."""
        return to_scalars(self._metrics.current_pbar_metrics())

    @property
    def world_size(self) -> int:
        return self.strategy.world_size

    @property
    def global_rank(self) -> int:
        return self.strategy.global_rank

    @property
    def local_rank(self) -> int:
        return self.strategy.local_rank

    @property
    def node_rank(self) -> int:
        return self.strategy.node_rank

    @property
    def is_global_zero(self) -> bool:
        return self.strategy.is_global_zero

    @property
    def num_devices(self) -> int:
        return len(self._devices)

    @property
    def device_ids(self) -> list[int]:
        return [d.index or 0 for d in self._devices]

    @property
    def interrupted(self) -> bool:
        return self.state.status == TrainerStatus.INTERRUPTED

    @property
    def training(self) -> bool:
        return self.state.stage == RunningStage.TRAINING

    @property
    def sanity_checking(self) -> bool:
        return self.state.stage == RunningStage.SANITY_CHECKING

    @property
    def validating(self) -> bool:
        return self.state.stage == RunningStage.VALIDATING

    @property
    def testing(self) -> bool:
        return self.state.stage == RunningStage.TESTING

    @property
    def predicting(self) -> bool:
        return self.state.stage == RunningStage.PREDICTING

    @property
    def default_root_dir(self) -> str:
        return self._default_root_dir if self._default_root_dir is not None else os.getcwd()

    @property
    def logger(self) -> Any:
        return self.loggers[0] if self.loggers else None

    @logger.setter
    def logger(self, logger: Any) -> None:
        self.loggers = [logger] if logger is not None else []

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
        return self.fit_loop._train_dataloader

    @property
    def val_dataloaders(self) -> Any:
        loaders = self._data.val_dataloaders
        if loaders is None:
            return None
        return loaders[0] if len(loaders) == 1 else loaders

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps the whole fit is expected to take (for schedulers like OneCycleLR)."""
        cfg = self._loop_config
        if cfg.max_epochs == -1:
            return float("inf") if cfg.max_steps == -1 else cfg.max_steps
        if self.fit_loop._train_dataloader is None:
            self.fit_loop.setup_data()
        total = self.num_training_batches
        if total == float("inf"):
            return cfg.max_steps if cfg.max_steps != -1 else float("inf")
        estimate = math.ceil(total / self.accumulate_grad_batches) * max(cfg.max_epochs, 1)
        return min(estimate, cfg.max_steps) if cfg.max_steps != -1 else estimate

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
        if isinstance(train_dataloaders, LightningDataModule):
            datamodule, train_dataloaders = train_dataloaders, None
        if datamodule is not None and (train_dataloaders is not None or val_dataloaders is not None):
            raise MisconfigurationException(
                "trainer.fit() got both dataloaders and a datamodule. Pass one or the other."
            )
        model = self._attach(model, datamodule, TrainerFn.FITTING)
        self._data.attach(train=train_dataloaders, val=val_dataloaders)
        self._run(model, TrainerFn.FITTING, ckpt_path, weights_only)

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
        return self._evaluate(
            model, dataloaders, ckpt_path, verbose, datamodule, TrainerFn.VALIDATING, weights_only
        )

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
        return self._evaluate(
            model, dataloaders, ckpt_path, verbose, datamodule, TrainerFn.TESTING, weights_only
        )

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
        if isinstance(dataloaders, LightningDataModule):
            datamodule, dataloaders = dataloaders, None
        model = self._attach(model, datamodule, TrainerFn.PREDICTING)
        self._data.attach(predict=dataloaders)
        self._return_predictions = True if return_predictions is None else return_predictions
        return self._run(model, TrainerFn.PREDICTING, self._eval_ckpt_path(model, ckpt_path), weights_only)

    def _evaluate(
        self, model: LightningModule | None, dataloaders: Any, ckpt_path: Any, verbose: bool,
        datamodule: LightningDataModule | None, fn: TrainerFn, weights_only: bool | None,
    ) -> list[dict[str, float]]:  # fmt: skip
        if isinstance(dataloaders, LightningDataModule):
            datamodule, dataloaders = dataloaders, None
        ckpt_path = self._eval_ckpt_path(model, ckpt_path)
        model = self._attach(model, datamodule, fn)
        stage = "val" if fn == TrainerFn.VALIDATING else "test"
        self._data.attach(**{stage: dataloaders})
        self._verbose = verbose
        return self._run(model, fn, ckpt_path, weights_only)  # type: ignore[no-any-return]

    def _eval_ckpt_path(self, model: LightningModule | None, ckpt_path: Any) -> Any:
        """No model and no ckpt_path after a fit: evaluate the best checkpoint of that fit (as documented)."""
        if ckpt_path is not None or model is not None:
            return ckpt_path
        cb = self.checkpoint_callback
        if cb is not None and getattr(cb, "best_model_path", None):
            return "best"
        if self.lightning_module is not None and self.state.fn == TrainerFn.FITTING:
            rank_zero_warn("No checkpoint of the last fit is known: the model's current weights are used.")
        return None

    def tune(
        self,
        model: LightningModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        datamodule: LightningDataModule | None = None,
        scale_batch_size_kwargs: dict[str, Any] | None = None,
        lr_find_kwargs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The 1.x way to tune: what ``Trainer(auto_scale_batch_size=..., auto_lr_find=...)`` asked for, batch
        size first. Returns ``{"scale_batch_size": <size or None>, "lr_find": <LRFinder or None>}``."""
        from fulmen.tuner import Tuner

        if isinstance(train_dataloaders, LightningDataModule):
            datamodule, train_dataloaders = train_dataloaders, None
        tuner = Tuner(self)
        result: dict[str, Any] = {"scale_batch_size": None, "lr_find": None}
        loaders = {"train_dataloaders": train_dataloaders, "val_dataloaders": val_dataloaders,
                   "datamodule": datamodule}  # fmt: skip
        if self.auto_scale_batch_size:
            options = {"mode": self.auto_scale_batch_size, **(scale_batch_size_kwargs or {})}
            result["scale_batch_size"] = tuner.scale_batch_size(model, **loaders, **options)
        if self.auto_lr_find:
            options = {"attr_name": self.auto_lr_find} if isinstance(self.auto_lr_find, str) else {}
            result["lr_find"] = tuner.lr_find(model, **loaders, **{**options, **(lr_find_kwargs or {})})
        return result

    # -- checkpoints -----------------------------------------------------------------------------------
    @property
    def ckpt_path(self) -> str | None:
        """The checkpoint the last run loaded (``None`` if it started from the model's own weights)."""
        return self._ckpt_path

    def save_checkpoint(
        self, filepath: str | Path, weights_only: bool | None = None, storage_options: Any = None
    ) -> None:
        """Write a checkpoint (atomically); a ``.safetensors`` path exports the weights only."""
        from fulmen.trainer.checkpointing import save_checkpoint

        if storage_options is not None:
            raise MisconfigurationException(
                "save_checkpoint(storage_options=...) is for remote filesystems, which fulmen does not write to. "
                "Save to a local path."
            )
        if self.lightning_module is None:
            raise MisconfigurationException(
                "trainer.save_checkpoint() needs a model: call it during or after trainer.fit()."
            )
        save_checkpoint(self, filepath, weights_only=bool(weights_only))
        self.strategy.barrier("Trainer.save_checkpoint")

    def _attach(
        self, model: LightningModule | None, datamodule: LightningDataModule | None, fn: TrainerFn
    ) -> LightningModule:
        if model is None:
            model = self.lightning_module
            if model is None:
                raise MisconfigurationException(
                    f"trainer.{fn.value}() needs a model: pass it as the first argument (no earlier fit() "
                    "attached one)."
                )
        if self._compile is not False and isinstance(model, LightningModule) and model._compiled_from is None:
            # Trainer(compile=...): as if the user had passed torch.compile(model, **options)
            options = self._compile if isinstance(self._compile, dict) else {}
            model = unwrap_compiled(torch.compile(model, **options))
        model = unwrap_compiled(model)
        if not isinstance(model, LightningModule):
            raise TypeError(
                f"trainer.{fn.value}() requires a LightningModule, got {type(model).__name__}. Subclass "
                "fulmen.LightningModule (or pass torch.compile(your_lightning_module))."
            )
        if datamodule is not None and not isinstance(datamodule, LightningDataModule):
            raise TypeError(f"datamodule must be a LightningDataModule, got {type(datamodule).__name__}.")
        self.datamodule = datamodule
        if datamodule is not None:
            datamodule.trainer = self
        return model

    # -- the run ---------------------------------------------------------------------------------------
    def _run(
        self, model: LightningModule, fn: TrainerFn, ckpt_path: Any, weights_only: bool | None = None
    ) -> Any:
        """One fit/validate/test/predict, in this process or in those the strategy starts for it."""
        return self.strategy.launch(self, self._run_here, model, fn, ckpt_path, weights_only)

    def _run_here(
        self, model: LightningModule, fn: TrainerFn, ckpt_path: Any, weights_only: bool | None = None
    ) -> Any:
        """The stage in this process; ``matmul_precision`` holds for the run and is restored after it."""
        previous = torch.get_float32_matmul_precision()
        if self._matmul_precision is not None:
            torch.set_float32_matmul_precision(self._matmul_precision)
        else:
            _suggest_matmul_precision(self.strategy.root_device)
        try:
            return self._run_stage(model, fn, ckpt_path, weights_only)
        finally:
            torch.set_float32_matmul_precision(previous)

    def _run_stage(
        self, model: LightningModule, fn: TrainerFn, ckpt_path: Any, weights_only: bool | None = None
    ) -> Any:
        self.state.fn = fn
        self.state.status = TrainerStatus.RUNNING
        if fn == TrainerFn.FITTING:  # a GradientAccumulationScheduler of an earlier fit changed it
            self._accumulate_grad_batches = self._loop_config.accumulate_grad_batches
        self.should_stop = False
        self._stop_agreed = False
        self.lightning_module = model
        model.trainer = self
        self.strategy.connect(model)
        self._hooks.reset()
        self._configure_callbacks(model)
        self._hooks.reset()
        self._check_model(model, fn)
        if ckpt_path is None and fn == TrainerFn.FITTING and slurm_requeued():
            ckpt_path = "last"  # a requeued SLURM job continues where the previous allocation stopped
        self._ckpt_request = (ckpt_path, weights_only is not False)
        self._ckpt_path = None
        if fn == TrainerFn.FITTING:
            self._signals.install()
        try:
            self._setup_run(model, fn)
            result: Any = None
            if fn == TrainerFn.FITTING:
                self._run_fit()
            elif fn == TrainerFn.PREDICTING:
                result = self._run_predict()
            else:
                result = self._run_evaluate(fn)
            self._teardown(fn)
            self.state.status = TrainerStatus.FINISHED
            self.state.stage = None
            return result
        except BaseException as exception:
            self.state.status = TrainerStatus.INTERRUPTED
            if not isinstance(exception, (SignalInterrupt, KeyboardInterrupt)):
                self.strategy.on_exception(exception)  # e.g. DDP: name the rank, release the other ranks
            self._hooks.call_callbacks("on_exception", exception)
            self._hooks.call_datamodule("on_exception", exception)
            if isinstance(exception, SignalInterrupt):
                self._teardown(fn, interrupted=True)
                self._signals.after_teardown(exception)
                return None
            if isinstance(exception, KeyboardInterrupt):
                rank_zero_warn("Detected KeyboardInterrupt, attempting graceful shutdown ...")
                self._teardown(fn, interrupted=True)
                return None
            self._teardown(fn, interrupted=True)
            raise

    def _configure_callbacks(self, model: LightningModule) -> None:
        from fulmen.trainer.connectors import attach_model_callbacks

        extra = self._hooks.call_module("configure_callbacks")
        self.callbacks = attach_model_callbacks(self.callbacks, extra)

    def _check_model(self, model: LightningModule, fn: TrainerFn) -> None:
        if fn == TrainerFn.FITTING:
            if not step_overridden(model, "train"):
                raise MisconfigurationException(
                    f"{type(model).__name__} has no `training_step()`; trainer.fit() needs one. Implement "
                    "training_step(self, batch, batch_idx) and return the loss."
                )
            if model.automatic_optimization and not self._hooks.module_overrides("configure_optimizers"):
                raise MisconfigurationException(
                    f"{type(model).__name__} has no `configure_optimizers()`; trainer.fit() needs one to know "
                    "what to optimise. Return e.g. torch.optim.Adam(self.parameters())."
                )
            if not self._data.has_source("train"):
                raise MisconfigurationException(
                    "No training data: pass `train_dataloaders` to trainer.fit(), give a datamodule with "
                    "`train_dataloader()`, or implement `train_dataloader()` in your LightningModule."
                )
            if not model.automatic_optimization:
                # Lightning's wording, so that searches for the message find the same answers
                if self.gradient_clip_val is not None and self.gradient_clip_val > 0:
                    raise MisconfigurationException(
                        "Automatic gradient clipping is not supported for manual optimization."
                        f" Remove `Trainer(gradient_clip_val={self.gradient_clip_val})`"
                        " or switch to automatic optimization."
                    )
                if self._loop_config.accumulate_grad_batches != 1:
                    raise MisconfigurationException(
                        "Automatic gradient accumulation is not supported for manual optimization."
                        f" Remove `Trainer(accumulate_grad_batches={self._loop_config.accumulate_grad_batches})`"
                        " or switch to automatic optimization."
                    )
                if "optimizer_idx" in inspect.signature(model.training_step).parameters:
                    raise MisconfigurationException(
                        f"{type(model).__name__}.training_step takes `optimizer_idx`, which is passed only under "
                        "automatic optimization. With `automatic_optimization = False`, remove the argument and "
                        "get the optimizers with `opt1, opt2 = self.optimizers()`."
                    )
            if self._data.has_source("val") and not step_overridden(model, "val"):
                rank_zero_warn(
                    "Validation data was given but the module has no `validation_step()`: validation is skipped."
                )
        elif fn == TrainerFn.VALIDATING and not step_overridden(model, "val"):
            raise MisconfigurationException(
                f"trainer.validate() needs `validation_step()` in {type(model).__name__}."
            )
        elif fn == TrainerFn.TESTING and not step_overridden(model, "test"):
            raise MisconfigurationException(f"trainer.test() needs `test_step()` in {type(model).__name__}.")
        elif fn == TrainerFn.PREDICTING and not self._data.has_source("predict"):
            raise MisconfigurationException(
                "No predict data: pass `dataloaders` to trainer.predict(), give a datamodule with "
                "`predict_dataloader()`, or implement `predict_dataloader()`."
            )

    def _setup_run(self, model: LightningModule, fn: TrainerFn) -> None:
        if self._deterministic is not None:
            torch.use_deterministic_algorithms(
                bool(self._deterministic), warn_only=self._deterministic == "warn"
            )
            if self._deterministic:
                os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        if self._benchmark is not None or self._deterministic:
            torch.backends.cudnn.benchmark = bool(self._benchmark) and not self._deterministic
        torch.autograd.set_detect_anomaly(self._detect_anomaly)
        hooks = self._hooks
        self.strategy.setup_environment()
        if self.datamodule is not None:
            hooks.call_datamodule("prepare_data")
        hooks.call_module("prepare_data")
        stage = fn.value
        if self.datamodule is not None:
            hooks.call_datamodule("setup", stage=stage)
        hooks.call_callbacks("setup", stage=stage)
        hooks.call_module("setup", stage=stage)
        hooks.call_module("configure_sharded_model")
        hooks.call_module("configure_model")
        checkpoint = self._load_requested_checkpoint(fn)
        self.strategy.setup(self)
        if fn == TrainerFn.FITTING:
            self._configure_optimizers(model)
            if checkpoint is not None:
                from fulmen.trainer.checkpointing import restore_training_state

                assert self._ckpt_path is not None
                restore_training_state(self, checkpoint, self._ckpt_path)
        if self.loggers and self.enable_autolog_hparams and fn == TrainerFn.FITTING:
            self._log_hyperparams(model)

    def _configure_optimizers(self, model: LightningModule) -> None:
        """Optimizers and schedulers from ``configure_optimizers`` (again, when a tuner changed the learning
        rate at fit start)."""
        optimizers, configs, frequencies, _ = parse_configure_optimizers(
            self._hooks.call_module("configure_optimizers"), manual=not model.automatic_optimization
        )
        if frequencies and not model.automatic_optimization:
            raise MisconfigurationException(
                f"configure_optimizers gave optimizer frequencies {frequencies}, which only automatic "
                "optimization uses. Under manual optimization decide in training_step which optimizer "
                "steps, and remove the 'frequency' keys."
            )
        self.strategy.setup_optimizers(optimizers)
        self.lr_scheduler_configs = configs
        self.optimizer_frequencies = frequencies
        self._wire_optimizers()
        if model.automatic_optimization:
            self.fit_loop.epoch_loop.automatic.setup()

    def _load_requested_checkpoint(self, fn: TrainerFn) -> dict[str, Any] | None:
        """Load ``ckpt_path`` (weights, datamodule and callback states); training state follows later."""
        from fulmen.trainer import checkpointing
        from fulmen.utilities import checkpoint_io

        ckpt_path, weights_only = self._ckpt_request
        path = checkpointing.resolve_ckpt_path(self, ckpt_path)
        if path is None:
            return None
        checkpoint = checkpoint_io.load(path, map_location="cpu", weights_only=weights_only)
        self._ckpt_path = path
        checkpointing.restore_module_and_callbacks(self, checkpoint, callbacks=fn == TrainerFn.FITTING)
        return checkpoint if fn == TrainerFn.FITTING else None

    def _wire_optimizers(self) -> None:
        """Under manual optimization every ``opt.step()`` is a global step; under automatic optimization
        the loop counts one per ``optimizer_step`` call instead (as Lightning does)."""
        module = self.lightning_module
        manual = module is not None and not module.automatic_optimization

        def count_step() -> None:
            self._progress.global_step += 1

        for opt in self.strategy._lightning_optimizers:
            opt._on_after_step = count_step if manual else _no_step_count

    def _log_hyperparams(self, model: LightningModule) -> None:
        hparams: dict[str, Any] = {}
        if model._log_hyperparams:
            hparams.update(model.hparams_initial)
        if self.datamodule is not None and self.datamodule._log_hyperparams:
            hparams.update(self.datamodule.hparams_initial)
        for logger in self.loggers:
            if hparams:
                logger.log_hyperparams(hparams)
            if hasattr(logger, "log_graph"):
                logger.log_graph(model)
            logger.save()

    def _run_fit(self) -> None:
        hooks = self._hooks
        self.state.stage = RunningStage.TRAINING
        hooks.call_callbacks("on_fit_start")
        hooks.call_module("on_fit_start")
        self._run_sanity_check()
        self.state.stage = RunningStage.TRAINING
        self.fit_loop.run()
        hooks.call_callbacks("on_fit_end")
        hooks.call_module("on_fit_end")

    def _run_sanity_check(self) -> None:
        steps = self.num_sanity_val_steps
        if steps == 0 or not self._data.validation_enabled(load=False):
            return
        stage = self.state.stage
        self.state.stage = RunningStage.SANITY_CHECKING
        hooks = self._hooks
        hooks.call_callbacks("on_sanity_check_start")
        loaders, counts = self._data.fit_val_dataloaders()
        counts = [min(steps, c) for c in counts]
        self.num_sanity_val_batches = counts
        self.validate_loop.run(loaders, counts, in_fit=True)
        hooks.call_callbacks("on_sanity_check_end")
        # values logged during the sanity check must not reach callbacks or loggers
        self._metrics.reset()
        self.state.stage = stage

    def _run_validation_in_fit(self) -> None:
        loaders, counts = self._data.fit_val_dataloaders()
        self.num_val_batches = counts
        self.state.stage = RunningStage.VALIDATING
        self.validate_loop.run(loaders, counts, in_fit=True)
        self.state.stage = RunningStage.TRAINING
        self._results = self.fit_loop.results

    def _run_evaluate(self, fn: TrainerFn) -> list[dict[str, float]]:
        stage = "val" if fn == TrainerFn.VALIDATING else "test"
        self.state.stage = RunningStage.VALIDATING if stage == "val" else RunningStage.TESTING
        loaders, counts = self._data.request_eval_dataloaders(stage)
        if stage == "val":
            self.num_val_batches = counts
            self._data.val_dataloaders = loaders
            loop = self.validate_loop
        else:
            self.num_test_batches = counts
            loop = self.test_loop
        self._metrics.reset()
        results = loop.run(loaders, counts, in_fit=False)
        if getattr(self, "_verbose", True) and self.is_global_zero and results:
            _print_results(results, "Validate" if stage == "val" else "Test")
        return results

    def _run_predict(self) -> Any:
        self.state.stage = RunningStage.PREDICTING
        loaders, counts = self._data.request_eval_dataloaders("predict")
        self.num_predict_batches = counts
        self.predictions = self.predict_loop.run(loaders, counts, self._return_predictions)
        return self.predictions

    def _teardown(self, fn: TrainerFn, interrupted: bool = False) -> None:
        stage = fn.value
        hooks = self._hooks
        if self.datamodule is not None:
            hooks.call_datamodule("teardown", stage=stage)
        hooks.call_callbacks("teardown", stage=stage)
        hooks.call_module("teardown", stage=stage)
        self.fit_loop.teardown()
        for logger in self.loggers:
            logger.finalize("success" if not interrupted else "failed")
        self.strategy.teardown()
        self._results = None
        self._signals.restore()

    # -- stopping, agreed between processes ----------------------------------------------------------------
    def _agree_to_stop(self) -> None:
        """Every rank stops if any rank set ``should_stop``. Asked after each validation run and at each epoch
        end, where ranks wait for each other anyway: no collective per batch. A stop set mid-epoch by one rank
        (say in its training_step) so takes effect on all ranks at the next of these points."""
        self.should_stop = self.strategy.reduce_boolean_decision(self.should_stop, all=False)
        self._stop_agreed = True

    @property
    def _stopping(self) -> bool:
        """``should_stop`` as the loops read it: with several processes, only once the ranks agreed on it."""
        return self.should_stop and (self._stop_agreed or self.strategy.world_size == 1)

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self.is_global_zero:
            print(*args, **kwargs)


def _check_barebones(**flags: Any) -> None:
    bad = {
        "logger": flags["logger"] not in (None, False),
        "enable_checkpointing": bool(flags["enable_checkpointing"]),
        "enable_progress_bar": bool(flags["enable_progress_bar"]),
        "enable_model_summary": bool(flags["enable_model_summary"]),
        "log_every_n_steps": flags["log_every_n_steps"] not in (None, 0),
        "detect_anomaly": bool(flags["detect_anomaly"]),
        "profiler": flags["profiler"] is not None,
    }
    for name, is_bad in bad.items():
        if is_bad:
            raise MisconfigurationException(
                f"Trainer(barebones=True) turns off features that cost time, but {name}={flags[name]!r} "
                f"asks for one. Remove {name} or set barebones=False."
            )


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


__all__ = ["Trainer"]


def _no_step_count() -> None:
    return None


_MATMUL_PRECISIONS = ("highest", "high", "medium")
_matmul_suggested = False


def _suggest_matmul_precision(device: torch.device) -> None:
    """Once per process, as Lightning does: a CUDA GPU with tensor cores left at float32 'highest' matmul
    precision runs float32 matmuls several times slower than it could."""
    global _matmul_suggested
    if _matmul_suggested or device.type != "cuda" or torch.get_float32_matmul_precision() != "highest":
        return
    if torch.cuda.get_device_capability(device) < (7, 0):  # no tensor cores before Volta
        return
    _matmul_suggested = True
    rank_zero_info(
        f"The CUDA device {torch.cuda.get_device_name(device)!r} has tensor cores, and float32 matmuls run at "
        "'highest' precision. Trainer(matmul_precision='high') (or 'medium') trades a little precision for "
        "much faster float32 matmuls; pass matmul_precision='highest' to keep the current setting and "
        "silence this message."
    )


def _precision_from_plugins(plugins: Any, precision: Any) -> Precision | None:
    """The precision object among ``Trainer(plugins=...)``, if any; refused together with ``precision=``."""
    if plugins is None:
        return None
    items = plugins if isinstance(plugins, (list, tuple)) else [plugins]
    found: Precision | None = None
    for plugin in items:
        if not isinstance(plugin, Precision):
            raise MisconfigurationException(
                f"plugins={plugins!r}: {type(plugin).__name__} is not a plugin fulmen knows. Pass precision "
                "objects from fulmen.plugins (Precision, MixedPrecision, HalfPrecision, DoublePrecision)."
            )
        if found is not None:
            raise MisconfigurationException(
                f"plugins={plugins!r} holds two precision plugins ({type(found).__name__} and "
                f"{type(plugin).__name__}). Pass one."
            )
        found = plugin
    if found is not None and precision is not None:
        raise MisconfigurationException(
            f"Trainer(precision={precision!r}) and plugins=[{type(found).__name__}(...)] both set the precision. "
            "Pass one of them."
        )
    return found

"""The Trainer's flags: the frozen :class:`TrainerConfig` (one documented field per flag, grouped), the types of
its groups, and :func:`parse_flags`, which validates every flag once, before anything runs, and assembles the
config from the groups that ``flag_parsing.py`` parses.

Nothing below the trainer validates a flag again; the loops read the fields of the config they are given.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Generic, TypedDict, TypeVar, overload

import torch

from fulmen.accelerators import Accelerator
from fulmen.precision import Precision
from fulmen.trainer.flag_parsing import (
    DEFAULT_MAX_EPOCHS,
    parse_accumulation,
    parse_batch_limits,
    parse_compat,
    parse_default_root_dir,
    parse_devices,
    parse_fast_dev_run,
    parse_hardware,
    parse_output_objects,
    parse_output_switches,
    parse_processes,
    parse_run_length,
    parse_run_settings,
    parse_step_flags,
    parse_validation_schedule,
)


@dataclass(frozen=True)
class TrainerConfig:
    """The validated flags of a Trainer (``trainer.config``). Replace a field with ``dataclasses.replace``."""

    # -- hardware ---------------------------------------------------------------------------------------
    accelerator: Accelerator
    """The accelerator object ('auto' resolved: CUDA, then MPS, then the CPU)."""
    devices: list[torch.device]
    """This node's devices, one per process (parsed from ``devices=`` against the machine)."""
    strategy: Any
    """``strategy=`` as given: a name (resolved by ``fulmen.strategies.select_strategy``) or a Strategy."""
    num_nodes: int
    """Machines taking part; processes = devices x num_nodes."""
    precision: str
    """One of '64-true', '32-true', '16-mixed', 'bf16-mixed', '16-true', 'bf16-true' (1.x spellings mapped)."""
    precision_plugin: Precision | None
    """A precision object from ``plugins=`` (then ``precision`` is its default), else None."""
    checkpoint_io: Any
    """A ``CheckpointIO`` from ``plugins=`` (the strategy's default ``TorchCheckpointIO`` otherwise)."""
    cluster_environment: Any
    """A cluster-environment plugin from ``plugins=`` (the launcher is detected otherwise)."""
    sync_batchnorm: bool
    """BatchNorm layers become SyncBatchNorm under DDP (the flag, or a ``TorchSyncBatchNorm`` in ``plugins=``)."""
    layer_sync: Any
    """The ``LayerSync`` applied when fitting under several processes: ``TorchSyncBatchNorm`` for
    ``sync_batchnorm=True``, or the one from ``plugins=``; None otherwise."""
    # -- the loop ---------------------------------------------------------------------------------------
    max_epochs: int
    """Epoch limit; -1: none (1000 when neither max_epochs, max_steps nor max_time is set)."""
    min_epochs: int | None
    """should_stop is deferred until this many epochs ran."""
    max_steps: int
    """Optimizer-step limit; -1: none."""
    min_steps: int | None
    """should_stop is deferred until this many optimizer steps ran."""
    max_time: datetime.timedelta | None
    """Wall-time limit (a Timer callback enforces it)."""
    limit_train_batches: int | float
    """Training batches per epoch: an int count or a fraction in [0, 1]."""
    limit_val_batches: int | float
    """Validation batches per run (0 disables validation)."""
    limit_test_batches: int | float
    """Test batches per run."""
    limit_predict_batches: int | float
    """Prediction batches per run."""
    overfit_batches: int | float
    """Train (and validate) on this many training batches, shuffling off."""
    val_check_interval: int | float | datetime.timedelta
    """Validate every N training batches (int), at this fraction of each epoch (float), or whenever this much
    time has passed since the last validation (a timedelta, checked after each training batch)."""
    check_val_every_n_epoch: int | None
    """Validate every N epochs; None: count val_check_interval across epochs."""
    num_sanity_val_steps: int | float
    """Validation batches run before training (inf: all)."""
    log_every_n_steps: int
    """Loggers receive step values every N optimizer-step batches."""
    accumulate_grad_batches: int
    """Batches per optimizer step when fit starts."""
    accumulation_schedule: dict[int, int] | None
    """The 1.x ``accumulate_grad_batches={epoch: factor}``: a GradientAccumulationScheduler is added for it."""
    gradient_clip_val: int | float | None
    """Clip gradients to this value (0 / None: no clipping)."""
    gradient_clip_algorithm: str | None
    """'norm' (the global L2 norm, the default) or 'value' (each element)."""
    reload_dataloaders_every_n_epochs: int
    """Ask for the dataloaders again every N epochs (0: once)."""
    fast_dev_run: int | bool
    """Run this many batches of each stage, once, with nothing written (False: off)."""
    # -- how a run runs ---------------------------------------------------------------------------------
    deterministic: bool | str | None
    """torch.use_deterministic_algorithms for the run (True, False, 'warn'); None leaves it alone."""
    benchmark: bool | None
    """torch.backends.cudnn.benchmark for the run; None leaves it alone (off when deterministic)."""
    inference_mode: bool
    """Evaluate under torch.inference_mode (else torch.no_grad)."""
    detect_anomaly: bool
    """torch.autograd anomaly detection for the run."""
    use_distributed_sampler: bool
    """Give DataLoaders a DistributedSampler under several processes."""
    matmul_precision: str | None
    """torch.set_float32_matmul_precision for the run ('highest', 'high', 'medium'); None leaves it."""
    compile: bool | dict[str, Any]
    """torch.compile the module's forward (a dict: torch.compile's options)."""
    # -- what a run writes and shows --------------------------------------------------------------------
    logger: Any
    """True/None (the default logger), False, a Logger or a list of them."""
    callbacks: list[Any]
    """The callbacks as given (the ones flags imply are added by the trainer)."""
    enable_checkpointing: bool
    """Add a ModelCheckpoint when none is given."""
    enable_progress_bar: bool
    """Add a TQDMProgressBar when none is given."""
    enable_model_summary: bool
    """Add a ModelSummary when none is given."""
    default_root_dir: str | None
    """Where logs and checkpoints go (None: the working directory at the time)."""
    enable_autolog_hparams: bool
    """Log the module's and data module's hyperparameters at fit start."""
    barebones: bool
    """Everything that costs time off (refused together with flags that turn it on)."""
    profiler: Any
    """The ``Profiler`` (``trainer.profiler``): the one passed, one built from "simple" / "advanced" /
    "pytorch", or a ``PassThroughProfiler`` for None."""
    model_registry: str | None
    """Accepted for compatibility; fulmen uploads nothing."""
    # -- 1.x ----------------------------------------------------------------------------------------------
    auto_scale_batch_size: str | None
    """'power' or 'binsearch': ``trainer.tune(model)`` runs the batch-size finder."""
    auto_lr_find: bool | str
    """True or the learning-rate attribute's name: ``trainer.tune(model)`` runs the learning-rate finder."""
    stochastic_weight_avg: bool
    """Add StochasticWeightAveraging() with its defaults."""
    arguments: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The arguments as given to ``Trainer(...)``: the tuner builds its trial trainers from them."""

    @property
    def max_epochs_defaulted(self) -> bool:
        """No limit on training was given (max_epochs, max_steps, max_time): fit stops after 1000 epochs."""
        return self.arguments.get("max_epochs") is None and self.max_epochs == DEFAULT_MAX_EPOCHS

    def given_max_epochs(self, default_applied: bool) -> int | None:
        """``trainer.max_epochs`` as Lightning shows it: None when not given, until a fit applies the default
        (1000, when no other limit was given either; with max_steps or max_time it stays None)."""
        if self.arguments.get("max_epochs") is None:
            if self.max_epochs == -1:  # max_steps / max_time limit the run
                return None
            if self.max_epochs_defaulted and not default_applied:
                return None
        return self.max_epochs  # given, fast_dev_run's 1, or the default a fit applied

    @property
    def active_profiler(self) -> Any:
        """The profiler that records the runs; None when it records nothing (no hook is wrapped then)."""
        from fulmen.profilers.base import PassThroughProfiler

        return None if isinstance(self.profiler, PassThroughProfiler) else self.profiler


_T = TypeVar("_T")


class ConfigField(Generic[_T]):
    """A read-only Trainer attribute that is one field of its config (``trainer.max_epochs``), typed."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> ConfigField[_T]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> _T: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        return self if obj is None else getattr(obj.config, self.name)

    def __set__(self, obj: Any, value: Any) -> None:  # read-only, as a property without a setter
        raise AttributeError(
            f"Trainer.{self.name} is read-only: it is the flag the Trainer was made with (trainer.config.{self.name})."
        )


# -- the groups of fields: what each parse_<group> function of flag_parsing.py returns ------------------
class ProcessFlags(TypedDict):
    """parse_processes: the strategy and the machines taking part."""

    strategy: Any
    num_nodes: int


class HardwareFlags(TypedDict):
    """parse_hardware: the accelerator, the precision and the plugins (parse_devices: the devices)."""

    accelerator: Accelerator
    precision: str
    precision_plugin: Precision | None
    checkpoint_io: Any
    cluster_environment: Any
    sync_batchnorm: bool
    layer_sync: Any


class AccumulationFlags(TypedDict):
    """parse_accumulation: batches per optimizer step (or the 1.x schedule)."""

    accumulate_grad_batches: int
    accumulation_schedule: dict[int, int] | None


class RunLengthFlags(TypedDict):
    """parse_run_length: how long fit runs (fast_dev_run, the epoch / step / time limits)."""

    fast_dev_run: int | bool
    max_epochs: int
    min_epochs: int | None
    max_steps: int
    min_steps: int | None
    max_time: datetime.timedelta | None


class ValidationScheduleFlags(TypedDict):
    """parse_validation_schedule: when validation runs, and the sanity check before fit."""

    val_check_interval: int | float | datetime.timedelta
    check_val_every_n_epoch: int | None
    num_sanity_val_steps: int | float


class StepFlags(TypedDict):
    """parse_step_flags: logging, gradient clipping and reloading the data, every so many steps / epochs."""

    log_every_n_steps: int
    gradient_clip_val: int | float | None
    gradient_clip_algorithm: str | None
    reload_dataloaders_every_n_epochs: int


class BatchLimitFlags(TypedDict):
    """parse_batch_limits: how many batches of each stage run."""

    limit_train_batches: int | float
    limit_val_batches: int | float
    limit_test_batches: int | float
    limit_predict_batches: int | float
    overfit_batches: int | float


class RunSettingFlags(TypedDict):
    """parse_run_settings: how a run runs (torch settings, samplers, compile)."""

    deterministic: bool | str | None
    benchmark: bool | None
    inference_mode: bool
    detect_anomaly: bool
    use_distributed_sampler: bool
    matmul_precision: str | None
    compile: bool | dict[str, Any]


class OutputSwitchFlags(TypedDict):
    """parse_output_switches: the logger and the flag-added callbacks, on or off."""

    logger: Any
    enable_checkpointing: bool
    enable_progress_bar: bool
    enable_model_summary: bool
    enable_autolog_hparams: bool
    barebones: bool


class OutputObjectFlags(TypedDict):
    """parse_output_objects: the callbacks as given, and the profiler."""

    callbacks: list[Any]
    profiler: Any


class CompatFlags(TypedDict):
    """parse_compat: the 1.x flags, and model_registry (accepted, unused)."""

    auto_scale_batch_size: str | None
    auto_lr_find: bool | str
    stochastic_weight_avg: bool
    model_registry: str | None


def parse_flags(arguments: dict[str, Any]) -> TrainerConfig:
    """Every ``Trainer(...)`` argument (by name, as given) -> a validated :class:`TrainerConfig`."""
    a = arguments
    # the groups in this order, each checking its flags in its own order: the first error a Trainer raises and
    # the order of the messages depend on it (tests compare both with Lightning); hence the switches of every
    # group are checked in parse_run_settings, and the devices are read after default_root_dir is checked
    accumulation = parse_accumulation(a)
    fast = parse_fast_dev_run(a)
    run_length = parse_run_length(a, fast)
    validation = parse_validation_schedule(a, fast)
    steps = parse_step_flags(a, fast)
    limits = parse_batch_limits(a, fast)
    switches = parse_output_switches(a)
    processes = parse_processes(a)
    settings = parse_run_settings(a)
    compat = parse_compat(a)
    hardware = parse_hardware(a)
    root_dir = parse_default_root_dir(a)
    devices = parse_devices(a, hardware["accelerator"])
    outputs = parse_output_objects(a)
    return TrainerConfig(
        **processes, **hardware, devices=devices, **run_length, **limits, **validation, **steps, **accumulation,
        **settings, **switches, default_root_dir=root_dir, **outputs, **compat, arguments=dict(a),
    )  # fmt: skip

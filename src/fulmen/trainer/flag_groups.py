"""The groups of the Trainer's flags, each a small frozen dataclass with one documented field per flag: what one
``parse_<group>`` function of :mod:`~fulmen.trainer.flag_parsing` returns. :class:`~fulmen.trainer.flags.TrainerConfig`
derives from all of them, so ``trainer.config.max_epochs`` reads a group's field directly.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fulmen.accelerators import Accelerator
    from fulmen.precision import Precision



@dataclass(frozen=True)
class HardwareFlags:
    """parse_hardware: the accelerator, the precision and the plugins (parse_devices: the devices)."""

    accelerator: Accelerator
    """The accelerator object ('auto' resolved: CUDA, then MPS, then the CPU)."""
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


@dataclass(frozen=True)
class ProcessFlags:
    """parse_processes: the strategy and the machines taking part."""

    strategy: Any
    """``strategy=`` as given: a name (resolved by ``fulmen.strategies.select_strategy``) or a Strategy."""
    num_nodes: int
    """Machines taking part; processes = devices x num_nodes."""


@dataclass(frozen=True)
class RunLengthFlags:
    """parse_run_length: how long fit runs (fast_dev_run, the epoch / step / time limits)."""

    fast_dev_run: int | bool
    """Run this many batches of each stage, once, with nothing written (False: off)."""
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


@dataclass(frozen=True)
class ValidationScheduleFlags:
    """parse_validation_schedule: when validation runs, and the sanity check before fit."""

    val_check_interval: int | float | datetime.timedelta
    """Validate every N training batches (int), at this fraction of each epoch (float), or whenever this much
    time has passed since the last validation (a timedelta, checked after each training batch)."""
    check_val_every_n_epoch: int | None
    """Validate every N epochs; None: count val_check_interval across epochs."""
    num_sanity_val_steps: int | float
    """Validation batches run before training (inf: all)."""


@dataclass(frozen=True)
class BatchLimitFlags:
    """parse_batch_limits: how many batches of each stage run."""

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


@dataclass(frozen=True)
class AccumulationFlags:
    """parse_accumulation: batches per optimizer step (or the 1.x schedule)."""

    accumulate_grad_batches: int
    """Batches per optimizer step when fit starts."""
    accumulation_schedule: dict[int, int] | None
    """The 1.x ``accumulate_grad_batches={epoch: factor}``: a GradientAccumulationScheduler is added for it."""


@dataclass(frozen=True)
class StepFlags:
    """parse_step_flags: logging, gradient clipping and reloading the data, every so many steps / epochs."""

    log_every_n_steps: int
    """Loggers receive step values every N optimizer-step batches."""
    gradient_clip_val: int | float | None
    """Clip gradients to this value (0 / None: no clipping)."""
    gradient_clip_algorithm: str | None
    """'norm' (the global L2 norm, the default) or 'value' (each element)."""
    reload_dataloaders_every_n_epochs: int
    """Ask for the dataloaders again every N epochs (0: once)."""


@dataclass(frozen=True)
class RunSettingFlags:
    """parse_run_settings: how a run runs (torch settings, samplers, compile)."""

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


@dataclass(frozen=True)
class OutputSwitchFlags:
    """parse_output_switches: the logger and the flag-added callbacks, on or off."""

    logger: Any
    """True/None (the default logger), False, a Logger or a list of them."""
    enable_checkpointing: bool
    """Add a ModelCheckpoint when none is given."""
    enable_progress_bar: bool
    """Add a TQDMProgressBar when none is given."""
    enable_model_summary: bool
    """Add a ModelSummary when none is given."""
    enable_autolog_hparams: bool
    """Log the module's and data module's hyperparameters at fit start."""
    barebones: bool
    """Everything that costs time off (refused together with flags that turn it on)."""


@dataclass(frozen=True)
class OutputObjectFlags:
    """parse_output_objects: the callbacks as given, and the profiler."""

    callbacks: list[Any]
    """The callbacks as given (the ones flags imply are added by the trainer)."""
    profiler: Any
    """The ``Profiler`` (``trainer.profiler``): the one passed, one built from "simple" / "advanced" /
    "pytorch", or a ``PassThroughProfiler`` for None."""


@dataclass(frozen=True)
class CompatFlags:
    """parse_compat: the 1.x flags, and model_registry (accepted, unused)."""

    auto_scale_batch_size: str | None
    """'power' or 'binsearch': ``trainer.tune(model)`` runs the batch-size finder."""
    auto_lr_find: bool | str
    """True or the learning-rate attribute's name: ``trainer.tune(model)`` runs the learning-rate finder."""
    stochastic_weight_avg: bool
    """Add StochasticWeightAveraging() with its defaults."""
    model_registry: str | None
    """Accepted for compatibility; fulmen uploads nothing."""


def values(group: object) -> dict[str, Any]:
    """A group's fields by name (not ``dataclasses.asdict``, which would copy the objects they hold)."""
    return {f.name: getattr(group, f.name) for f in fields(group)}  # type: ignore[arg-type]

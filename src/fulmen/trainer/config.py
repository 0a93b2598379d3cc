"""Every Trainer flag is parsed and validated here, once, before anything runs: :func:`parse_flags` returns a
frozen :class:`TrainerConfig`.

Errors name the flag, show the value received, and say what is allowed. Nothing below the trainer validates
a flag again; the loops read the fields of the config they are given.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

import torch

from fulmen.accelerators import Accelerator, select_accelerator
from fulmen.precision import Precision, normalize_precision
from fulmen.utilities import cloud_io
from fulmen.utilities.clipping import check_clip_algorithm, check_clip_val
from fulmen.utilities.exceptions import InvalidTypeError, InvalidValueError, MisconfigurationException
from fulmen.utilities.parsing import parse_time
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

MATMUL_PRECISIONS = ("highest", "high", "medium")


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
        return self.arguments.get("max_epochs") is None and self.max_epochs == _DEFAULT_MAX_EPOCHS

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


def parse_flags(arguments: dict[str, Any]) -> TrainerConfig:
    """Every ``Trainer(...)`` argument (by name, as given) -> a validated :class:`TrainerConfig`."""
    a = arguments
    schedule = None
    accumulate = a["accumulate_grad_batches"]
    if isinstance(accumulate, dict):  # the 1.x spelling of a GradientAccumulationScheduler
        schedule, accumulate = dict(accumulate), 1
    hint = ", or a dict {epoch: factor} for a schedule (see the GradientAccumulationScheduler callback)"
    # 0 is taken, as by Lightning: validate / test / predict run, and fit refuses it at its first training batch
    _check_int("accumulate_grad_batches", accumulate, minimum=0, hint=hint)
    loop = _parse_loop(a)
    logger, checkpointing, progress_bar, summary = (
        a["logger"], a["enable_checkpointing"], a["enable_progress_bar"], a["enable_model_summary"]
    )  # fmt: skip
    if a["barebones"]:
        _check_barebones(a)
        logger, checkpointing, progress_bar, summary = False, False, False, False
    num_nodes = a["num_nodes"]
    _check_int("num_nodes", num_nodes, minimum=1)
    deterministic = a["deterministic"]
    if deterministic not in (None, True, False, "warn"):
        raise MisconfigurationException(f"deterministic={deterministic!r} must be True, False, 'warn' or None.")
    for name in ("inference_mode", "sync_batchnorm", "stochastic_weight_avg", "barebones", "detect_anomaly"):
        if not isinstance(a[name], bool):
            raise MisconfigurationException(f"{name}={a[name]!r} must be True or False.")
    matmul = a["matmul_precision"]
    if matmul is not None and matmul not in MATMUL_PRECISIONS:
        raise MisconfigurationException(
            f"matmul_precision={matmul!r} is not supported. Use one of {MATMUL_PRECISIONS} (passed to "
            "torch.set_float32_matmul_precision for the run), or None to leave the setting alone."
        )
    if not isinstance(a["compile"], (bool, dict)):
        raise MisconfigurationException(
            f"compile={a['compile']!r} must be True, False or a dict of torch.compile options, e.g. "
            "compile={'mode': 'reduce-overhead'} or compile={'backend': 'inductor', 'dynamic': False}."
        )
    scale = a["auto_scale_batch_size"]
    if scale not in (None, False, True, "power", "binsearch"):
        raise MisconfigurationException(
            f"auto_scale_batch_size={scale!r} must be None/False, True (= 'power'), 'power' or 'binsearch'; "
            "trainer.tune(model) then runs the batch-size finder."
        )
    if not isinstance(a["auto_lr_find"], (bool, str)):
        raise MisconfigurationException(
            f"auto_lr_find={a['auto_lr_find']!r} must be True, False, or the name of the module attribute that "
            "holds the learning rate; trainer.tune(model) then runs the learning-rate finder."
        )
    if a["model_registry"] is not None:
        rank_zero_warn(
            f"Trainer(model_registry={a['model_registry']!r}): fulmen uploads nothing to a model registry; the "
            "argument is ignored (checkpoints are written locally)."
        )
    precision_plugin, checkpoint_io, cluster_environment, layer_sync = _from_plugins(
        a["plugins"], a["precision"], a["sync_batchnorm"]
    )
    precision = normalize_precision(a["precision"]) if precision_plugin is None else precision_plugin.name
    accelerator = select_accelerator(a["accelerator"])
    root = a["default_root_dir"]
    cloud_io.check_reachable(root, "Trainer(default_root_dir)")
    return TrainerConfig(
        accelerator=accelerator, devices=accelerator.resolve_devices(a["devices"]), strategy=a["strategy"],
        num_nodes=num_nodes, precision=precision, precision_plugin=precision_plugin, checkpoint_io=checkpoint_io,
        cluster_environment=cluster_environment, layer_sync=layer_sync,
        sync_batchnorm=_is_sync_batchnorm(layer_sync), accumulate_grad_batches=accumulate, accumulation_schedule=schedule,
        deterministic=deterministic, benchmark=a["benchmark"], inference_mode=a["inference_mode"],
        detect_anomaly=a["detect_anomaly"], use_distributed_sampler=a["use_distributed_sampler"],
        matmul_precision=matmul, compile=a["compile"], logger=logger, callbacks=_callback_list(a["callbacks"]),
        enable_checkpointing=checkpointing is not False, enable_progress_bar=progress_bar is not False,
        enable_model_summary=summary is not False,
        default_root_dir=cloud_io.local(root) if root is not None else None,
        enable_autolog_hparams=a["enable_autolog_hparams"], barebones=a["barebones"], profiler=_profiler(a["profiler"]),
        model_registry=a["model_registry"], auto_scale_batch_size="power" if scale is True else scale or None,
        auto_lr_find=a["auto_lr_find"], stochastic_weight_avg=a["stochastic_weight_avg"], arguments=dict(a),
        **loop,
    )  # fmt: skip


# -- the loop flags --------------------------------------------------------------------------------------
def _check_int(name: str, value: Any, minimum: int | None = 0, allow_none: bool = False, hint: str = "") -> None:
    """``value`` is an int (``minimum`` None: of any sign, as Lightning takes ``min_epochs=-1``)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        use = "an int" if minimum is None else f"an int >= {minimum}"
        raise InvalidTypeError(f"`{name}` should be an integer: got {name}={value!r}; use {use}{hint}.")
    if minimum is not None and value < minimum:
        what = "a non-negative integer or -1" if minimum == -1 else f"an int >= {minimum}"
        raise InvalidValueError(f"`{name}` must be {what}: got {name}={value!r}{hint}.")


def _limit(name: str, value: Any) -> int | float:
    """limit_*_batches / overfit_batches: an int count or a float fraction in [0, 1]."""
    if value is None:
        return 1.0
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise InvalidValueError(f"{name}={value!r} must be >= 0 (an int counts batches).")
        return value
    if isinstance(value, float):
        if not 0.0 <= value <= 1.0:
            raise InvalidValueError(
                f"{name}={value!r} is a fraction outside [0.0, 1.0]. Use a float in that range, or an int "
                "number of batches."
            )
        return value
    raise InvalidTypeError(f"{name}={value!r} must be an int number of batches or a float in [0.0, 1.0].")


_DEFAULT_MAX_EPOCHS = 1000


def _say_whole_limit(name: str, value: Any) -> None:
    """A limit set explicitly to 1 or 1.0 is easily meant as the other one (one batch vs. all of them): say
    which it is, in Lightning's words."""
    if isinstance(value, bool) or value != 1:
        return
    per_epoch = " per epoch" if name == "limit_train_batches" else ""
    amount = "1 batch" if isinstance(value, int) else "100% of the batches"
    rank_zero_info(f"`Trainer({name}={value!r})` was configured so {amount}{per_epoch} will be used.")


def _parse_loop(a: dict[str, Any]) -> dict[str, Any]:
    fast_dev_run = a["fast_dev_run"]
    if isinstance(fast_dev_run, bool) or fast_dev_run is None:
        fast = int(bool(fast_dev_run))
    elif isinstance(fast_dev_run, int) and fast_dev_run >= 0:
        fast = fast_dev_run
    else:
        raise InvalidValueError(
            f"fast_dev_run={fast_dev_run!r} must be a bool or an int >= 0 (the number of batches to run)."
        )
    max_steps, max_epochs = a["max_steps"], a["max_epochs"]
    _check_int("max_steps", max_steps, minimum=-1, hint=" (-1 means no limit)")
    _check_int("max_epochs", max_epochs, minimum=-1, allow_none=True, hint=" (-1 means no limit)")
    min_epochs, min_steps = a["min_epochs"], a["min_steps"]
    # any int, as in Lightning: a negative minimum is no minimum, and max_epochs wins over a larger min_epochs
    _check_int("min_epochs", min_epochs, minimum=None, allow_none=True)
    _check_int("min_steps", min_steps, minimum=None, allow_none=True)
    parsed_time = parse_time(a["max_time"])
    if max_epochs is None:
        if max_steps == -1 and parsed_time is None and not fast_dev_run:
            max_epochs = _DEFAULT_MAX_EPOCHS  # fit says so (TrainerConfig.max_epochs_defaulted)
        else:
            max_epochs = -1

    every = a["check_val_every_n_epoch"]
    _check_int("check_val_every_n_epoch", every, minimum=1, allow_none=True)
    vci = a["val_check_interval"]
    if vci is None:
        vci = 1.0
    elif isinstance(vci, (datetime.timedelta, dict, str)):  # a duration: validate whenever that much time passed
        vci = parse_time(vci, "val_check_interval")
        if vci is None or vci.total_seconds() <= 0:
            raise MisconfigurationException(f"val_check_interval={a['val_check_interval']!r}: a duration must be > 0.")
    elif isinstance(vci, bool) or not isinstance(vci, (int, float)):
        raise MisconfigurationException(
            f"val_check_interval={vci!r} must be a float in (0.0, 1.0] (a fraction of the training epoch), an "
            "int >= 1 (a number of training batches) or a duration ('DD:HH:MM:SS', a datetime.timedelta or a "
            "dict of its arguments)."
        )
    elif isinstance(vci, float) and every is None:
        raise MisconfigurationException(
            "`val_check_interval` should be an integer or a time-based duration (str 'DD:HH:MM:SS', "
            "datetime.timedelta, or dict kwargs for timedelta) when `check_val_every_n_epoch=None`. A fraction "
            f"of an epoch (val_check_interval={vci!r}) needs epochs to count in."
        )
    elif isinstance(vci, float) and not 0.0 <= vci <= 1.0:  # 0.0: after every batch, as in Lightning
        raise MisconfigurationException(
            f"val_check_interval={vci!r} is out of range: a float must be in [0.0, 1.0] (a fraction of the "
            "training epoch). For a number of batches pass an int."
        )
    elif isinstance(vci, int) and vci < 0:  # 0 is taken, as by Lightning: fit refuses it once validation is due
        raise MisconfigurationException(f"val_check_interval={vci!r} must be >= 1 when it is an int (batches).")
    if a["val_check_interval"] is not None and vci == 1 and not isinstance(vci, datetime.timedelta):
        # 1 and 1.0 read alike but mean "every batch" and "every epoch": say which one was given
        when = "after every training batch" if isinstance(vci, int) else "at the end of every training epoch"
        rank_zero_info(f"`Trainer(val_check_interval={vci!r})` was configured so validation will run {when}.")

    sanity_flag = a["num_sanity_val_steps"]
    if sanity_flag is None:
        sanity: int | float = 2
    elif sanity_flag == -1:
        sanity = float("inf")
    else:  # any other negative int: no sanity check, as in Lightning
        _check_int("num_sanity_val_steps", sanity_flag, minimum=None)
        sanity = sanity_flag
    log_every = a["log_every_n_steps"]
    if log_every is None:
        log_every = 50
    else:
        _check_int("log_every_n_steps", log_every)
    clip_val, clip_algorithm = a["gradient_clip_val"], a["gradient_clip_algorithm"]
    check_clip_val(clip_val)
    if clip_algorithm is not None:
        clip_algorithm = check_clip_algorithm(clip_algorithm)
    reload_every = a["reload_dataloaders_every_n_epochs"]
    _check_int("reload_dataloaders_every_n_epochs", reload_every)

    overfit = _limit("overfit_batches", a["overfit_batches"] if a["overfit_batches"] is not None else 0.0)
    # the limits that overfit_batches / fast_dev_run replace are not read, so not checked (as in Lightning)
    replaced = {"limit_train_batches", "limit_val_batches"} if overfit > 0 else set()
    if fast:
        replaced |= {"limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches"}
    limits = {name: 1.0 if name in replaced else _limit(name, a[name]) for name in
              ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches")}  # fmt: skip
    for name in (*(n for n in limits if n not in replaced), "overfit_batches"):
        _say_whole_limit(name, a[name])
    if overfit > 0:
        # the same share of the training and of the validation data: the run still validates (on as many batches),
        # so monitored metrics and checkpoints work while overfitting
        limits["limit_train_batches"] = limits["limit_val_batches"] = overfit
    if fast:
        for key in limits:
            limits[key] = fast
        max_steps, max_epochs, sanity, log_every, vci, every = fast, 1, 0, 1, 1.0, 1
        rank_zero_info(
            f"Running in `fast_dev_run` mode: will run the requested loop using {fast} batch(es). Logging and "
            "checkpointing is suppressed."
        )
    return {
        "max_epochs": max_epochs, "min_epochs": min_epochs, "max_steps": max_steps, "min_steps": min_steps,
        "max_time": parsed_time, "overfit_batches": overfit, "val_check_interval": vci,
        "check_val_every_n_epoch": every, "num_sanity_val_steps": sanity, "log_every_n_steps": log_every,
        "gradient_clip_val": clip_val, "gradient_clip_algorithm": clip_algorithm,
        "reload_dataloaders_every_n_epochs": reload_every, "fast_dev_run": fast_dev_run if fast else False,
        **limits,
    }  # fmt: skip


_PROFILERS = {"simple": "SimpleProfiler", "advanced": "AdvancedProfiler", "pytorch": "PyTorchProfiler"}


def _profiler(value: Any) -> Any:
    from fulmen.profilers.base import PassThroughProfiler
    from fulmen.profilers.profiler import Profiler

    if value is None:
        return PassThroughProfiler()
    from fulmen import profilers

    if isinstance(value, str):
        name = _PROFILERS.get(value.lower())
        if name is None:
            raise MisconfigurationException(
                f"Trainer(profiler={value!r}): as a string it must be one of {sorted(_PROFILERS)}; or pass a "
                "Profiler object (fulmen.profilers.SimpleProfiler(dirpath=..., filename=...), ...)."
            )
        return getattr(profilers, name)()
    if not isinstance(value, Profiler):
        raise MisconfigurationException(
            f"Trainer(profiler={value!r}): expected None, one of {sorted(_PROFILERS)}, or a "
            f"fulmen.profilers.Profiler; got a {type(value).__name__}."
        )
    return value


# -- the others --------------------------------------------------------------------------------------------
def _check_barebones(a: dict[str, Any]) -> None:
    bad = {
        "logger": a["logger"] not in (None, False),
        "enable_checkpointing": bool(a["enable_checkpointing"]),
        "enable_progress_bar": bool(a["enable_progress_bar"]),
        "enable_model_summary": bool(a["enable_model_summary"]),
        "log_every_n_steps": a["log_every_n_steps"] not in (None, 0),
        "detect_anomaly": bool(a["detect_anomaly"]),
        "profiler": a["profiler"] is not None,
    }
    for name, is_bad in bad.items():
        if is_bad:
            raise InvalidValueError(
                f"Trainer(barebones=True) turns off features that cost time, but {name}={a[name]!r} asks for "
                f"one. Remove {name} or set barebones=False."
            )


def _callback_list(callbacks: Any) -> list[Any]:
    from collections.abc import Iterable

    from fulmen.callbacks.callback import Callback

    if callbacks is None:
        result: list[Any] = []
    elif isinstance(callbacks, Callback):
        result = [callbacks]
    elif isinstance(callbacks, Iterable):
        result = list(callbacks)
    else:
        raise InvalidTypeError(f"callbacks={callbacks!r} must be a Callback or a list of Callbacks.")
    for cb in result:
        if not isinstance(cb, Callback):
            raise MisconfigurationException(
                f"callbacks contains {cb!r}, a {type(cb).__name__}; every callback must subclass fulmen.Callback."
            )
    return result


def _from_plugins(plugins: Any, precision: Any, sync_batchnorm: bool) -> tuple[Precision | None, Any, Any, Any]:
    """The precision object, the ``CheckpointIO``, the cluster environment and the ``LayerSync`` among
    ``Trainer(plugins=...)`` (at most one of each); a precision plugin is refused together with ``precision=``,
    a ``LayerSync`` other than ``TorchSyncBatchNorm`` together with ``sync_batchnorm=True``.

    Lightning's own checkpoint-I/O and cluster-environment objects count (see ``fulmen.plugins._interop``): a
    Lightning (Fabric) environment is wrapped so that fulmen's strategies can read its layout."""
    from fulmen.plugins.layer_sync import LayerSync, TorchSyncBatchNorm

    if plugins is None:
        return None, None, None, TorchSyncBatchNorm() if sync_batchnorm else None
    from fulmen.plugins.environments import as_cluster_environment
    from fulmen.plugins.io import CheckpointIO

    items = plugins if isinstance(plugins, (list, tuple)) else [plugins]
    found: dict[str, Any] = {}
    for plugin in items:
        kinds = {Precision: "precision", CheckpointIO: "checkpoint_io", LayerSync: "layer_sync"}
        kind = next((name for cls, name in kinds.items() if isinstance(plugin, cls)), None)
        environment = as_cluster_environment(plugin) if kind is None else None
        if environment is not None:
            kind, plugin = "cluster_environment", environment
        if kind is None:
            raise MisconfigurationException(
                f"plugins={plugins!r}: {type(plugin).__name__} is not a plugin fulmen knows. Pass precision "
                "objects (Precision, MixedPrecision, HalfPrecision, DoublePrecision, FSDPPrecision), a CheckpointIO "
                "(TorchCheckpointIO, AsyncCheckpointIO, or a subclass), a cluster environment (SLURMEnvironment, "
                "TorchElasticEnvironment, LightningEnvironment, ...) or a LayerSync (TorchSyncBatchNorm) from "
                "fulmen.plugins, or Lightning's own CheckpointIO / ClusterEnvironment objects."
            )
        if kind in found:
            raise MisconfigurationException(
                f"plugins={plugins!r} holds two {kind.replace('_', ' ')} plugins ({type(found[kind]).__name__} and "
                f"{type(plugin).__name__}). Pass one."
            )
        found[kind] = plugin
    precision_plugin = found.get("precision")
    if precision_plugin is not None and precision is not None:
        raise InvalidValueError(
            f"Trainer(precision={precision!r}) and plugins=[{type(precision_plugin).__name__}(...)] both set the "
            "precision. Pass one of them."
        )
    layer_sync = found.get("layer_sync")
    if sync_batchnorm and layer_sync is not None and not isinstance(layer_sync, TorchSyncBatchNorm):
        raise MisconfigurationException(
            f"Trainer(sync_batchnorm=True) and plugins=[{type(layer_sync).__name__}()] both choose how layers "
            "synchronise. Pass one of them: sync_batchnorm=True is plugins=[TorchSyncBatchNorm()]."
        )
    if layer_sync is None and sync_batchnorm:
        layer_sync = TorchSyncBatchNorm()
    return precision_plugin, found.get("checkpoint_io"), found.get("cluster_environment"), layer_sync


def _is_sync_batchnorm(layer_sync: Any) -> bool:
    """Whether the layers synchronised are torch's SyncBatchNorm (what ``sync_batchnorm`` reports)."""
    from fulmen.plugins.layer_sync import TorchSyncBatchNorm

    return isinstance(layer_sync, TorchSyncBatchNorm)

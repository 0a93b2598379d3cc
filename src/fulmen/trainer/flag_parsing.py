"""The validation of the Trainer's flags, one ``parse_<group>`` function per group of
:class:`~fulmen.trainer.flags.TrainerConfig` fields (the groups are in ``flag_groups.py``): each takes the
arguments as given and returns the validated values of its group; :func:`~fulmen.trainer.flags.parse_flags`
assembles the config from them.

Errors name the flag, show the value received, and say what is allowed. ``parse_flags`` calls the groups in a
fixed order, and each group checks its flags in a fixed order: together they are the order of the errors and
messages, which tests compare with Lightning's.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

import torch

from fulmen.accelerators import Accelerator, select_accelerator
from fulmen.precision import Precision, normalize_precision
from fulmen.trainer.flag_groups import (
    AccumulationFlags,
    BatchLimitFlags,
    CompatFlags,
    HardwareFlags,
    OutputObjectFlags,
    OutputSwitchFlags,
    ProcessFlags,
    RunLengthFlags,
    RunSettingFlags,
    StepFlags,
    ValidationScheduleFlags,
)
from fulmen.utilities import cloud_io
from fulmen.utilities.clipping import check_clip_algorithm, check_clip_val
from fulmen.utilities.exceptions import InvalidTypeError, InvalidValueError, MisconfigurationException
from fulmen.utilities.parsing import parse_time
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

MATMUL_PRECISIONS = ("highest", "high", "medium")
DEFAULT_MAX_EPOCHS = 1000
"""max_epochs when neither max_epochs, max_steps nor max_time is given."""

_LIMITS = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches")
_PROFILERS = {"simple": "SimpleProfiler", "advanced": "AdvancedProfiler", "pytorch": "PyTorchProfiler"}
_SWITCHES = ("inference_mode", "sync_batchnorm", "stochastic_weight_avg", "barebones", "detect_anomaly")


# -- checks shared by the groups -----------------------------------------------------------------------------
def check_int(name: str, value: Any, minimum: int | None = 0, allow_none: bool = False, hint: str = "") -> None:
    """``value`` is an int >= ``minimum`` (-1: "a non-negative integer or -1"; None: of any sign, as Lightning
    takes ``min_epochs=-1``)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        use = "an int" if minimum is None else f"an int >= {minimum}"
        raise InvalidTypeError(f"`{name}` should be an integer: got {name}={value!r}; use {use}{hint}.")
    if minimum is not None and value < minimum:
        what = "a non-negative integer or -1" if minimum == -1 else f"an int >= {minimum}"
        raise InvalidValueError(f"`{name}` must be {what}: got {name}={value!r}{hint}.")


def _count_or_fraction(name: str, value: Any) -> int | float:
    """limit_*_batches / overfit_batches: an int count or a float fraction in [0, 1] (None: all, 1.0)."""
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


def _say_which_one(name: str, value: Any, as_int: str, as_float: str) -> None:
    """1 and 1.0 read alike but mean different things (one batch / all of them, every batch / every epoch): a
    flag given as either is said back, in Lightning's words, with what it means."""
    if isinstance(value, bool) or value != 1:
        return
    meaning = as_int if isinstance(value, int) else as_float
    rank_zero_info(f"`Trainer({name}={value!r})` was configured so {meaning}.")


# -- the loop ------------------------------------------------------------------------------------------------
def parse_accumulation(a: dict[str, Any]) -> AccumulationFlags:
    """Batches per optimizer step; the 1.x ``{epoch: factor}`` becomes a schedule (and 1 to start with)."""
    schedule = None
    accumulate = a["accumulate_grad_batches"]
    if isinstance(accumulate, dict):  # the 1.x spelling of a GradientAccumulationScheduler
        schedule, accumulate = dict(accumulate), 1
    hint = ", or a dict {epoch: factor} for a schedule (see the GradientAccumulationScheduler callback)"
    # 0 is taken, as by Lightning: validate / test / predict run, and fit refuses it at its first training batch
    check_int("accumulate_grad_batches", accumulate, minimum=0, hint=hint)
    return AccumulationFlags(accumulate_grad_batches=accumulate, accumulation_schedule=schedule)


def parse_fast_dev_run(a: dict[str, Any]) -> int:
    """The number of batches ``fast_dev_run`` runs of each stage (0: off)."""
    fast_dev_run = a["fast_dev_run"]
    if isinstance(fast_dev_run, bool) or fast_dev_run is None:
        return int(bool(fast_dev_run))
    if isinstance(fast_dev_run, int) and fast_dev_run >= 0:
        return fast_dev_run
    raise InvalidValueError(
        f"fast_dev_run={fast_dev_run!r} must be a bool or an int >= 0 (the number of batches to run)."
    )


def parse_run_length(a: dict[str, Any], fast: int) -> RunLengthFlags:
    """The epoch, step and time limits (``fast``: fast_dev_run's batches, which replace them)."""
    max_steps, max_epochs = a["max_steps"], a["max_epochs"]
    check_int("max_steps", max_steps, minimum=-1, hint=" (-1 means no limit)")
    check_int("max_epochs", max_epochs, minimum=-1, allow_none=True, hint=" (-1 means no limit)")
    min_epochs, min_steps = a["min_epochs"], a["min_steps"]
    # any int, as in Lightning: a negative minimum is no minimum, and max_epochs wins over a larger min_epochs
    check_int("min_epochs", min_epochs, minimum=None, allow_none=True)
    check_int("min_steps", min_steps, minimum=None, allow_none=True)
    parsed_time = parse_time(a["max_time"])
    if max_epochs is None:
        if max_steps == -1 and parsed_time is None and not fast:
            max_epochs = DEFAULT_MAX_EPOCHS  # fit says so (TrainerConfig.max_epochs_defaulted)
        else:
            max_epochs = -1
    if fast:
        max_steps, max_epochs = fast, 1
    return RunLengthFlags(
        fast_dev_run=a["fast_dev_run"] if fast else False, max_epochs=max_epochs, min_epochs=min_epochs,
        max_steps=max_steps, min_steps=min_steps, max_time=parsed_time,
    )  # fmt: skip


def _val_check_interval(given: Any, every: int | None) -> int | float | datetime.timedelta:
    """A fraction of an epoch (float), a number of batches (int) or a duration (None: 1.0, every epoch)."""
    if given is None:
        return 1.0
    if isinstance(given, (datetime.timedelta, dict, str)):  # a duration: validate whenever that much time passed
        duration = parse_time(given, "val_check_interval")
        if duration is None or duration.total_seconds() <= 0:
            raise MisconfigurationException(f"val_check_interval={given!r}: a duration must be > 0.")
        return duration
    if isinstance(given, bool) or not isinstance(given, (int, float)):
        raise MisconfigurationException(
            f"val_check_interval={given!r} must be a float in (0.0, 1.0] (a fraction of the training epoch), an "
            "int >= 1 (a number of training batches) or a duration ('DD:HH:MM:SS', a datetime.timedelta or a "
            "dict of its arguments)."
        )
    if isinstance(given, float) and every is None:
        raise MisconfigurationException(
            "`val_check_interval` should be an integer or a time-based duration (str 'DD:HH:MM:SS', "
            "datetime.timedelta, or dict kwargs for timedelta) when `check_val_every_n_epoch=None`. A fraction "
            f"of an epoch (val_check_interval={given!r}) needs epochs to count in."
        )
    if isinstance(given, float) and not 0.0 <= given <= 1.0:  # 0.0: after every batch, as in Lightning
        raise MisconfigurationException(
            f"val_check_interval={given!r} is out of range: a float must be in [0.0, 1.0] (a fraction of the "
            "training epoch). For a number of batches pass an int."
        )
    if isinstance(given, int) and given < 0:  # 0 is taken, as by Lightning: fit refuses it once validation is due
        raise MisconfigurationException(f"val_check_interval={given!r} must be >= 1 when it is an int (batches).")
    return given


def parse_validation_schedule(a: dict[str, Any], fast: int) -> ValidationScheduleFlags:
    """When validation runs during fit, and how many batches the sanity check before it runs."""
    every = a["check_val_every_n_epoch"]
    check_int("check_val_every_n_epoch", every, minimum=1, allow_none=True)
    interval = _val_check_interval(a["val_check_interval"], every)
    if a["val_check_interval"] is not None:  # a duration is never 1
        _say_which_one("val_check_interval", interval, "validation will run after every training batch",
                       "validation will run at the end of every training epoch")  # fmt: skip
    sanity_flag = a["num_sanity_val_steps"]
    if sanity_flag is None:
        sanity: int | float = 2
    elif sanity_flag == -1:
        sanity = float("inf")
    else:  # any other negative int: no sanity check, as in Lightning
        check_int("num_sanity_val_steps", sanity_flag, minimum=None)
        sanity = sanity_flag
    if fast:
        interval, every, sanity = 1.0, 1, 0
    return ValidationScheduleFlags(
        val_check_interval=interval, check_val_every_n_epoch=every, num_sanity_val_steps=sanity,
    )


def parse_step_flags(a: dict[str, Any], fast: int) -> StepFlags:
    """What the training loop does every so many steps or epochs: log, clip gradients, reload the data."""
    log_every = a["log_every_n_steps"]
    if log_every is None:
        log_every = 50
    else:
        check_int("log_every_n_steps", log_every)
    clip_val, clip_algorithm = a["gradient_clip_val"], a["gradient_clip_algorithm"]
    check_clip_val(clip_val)
    if clip_algorithm is not None:
        clip_algorithm = check_clip_algorithm(clip_algorithm)
    reload_every = a["reload_dataloaders_every_n_epochs"]
    check_int("reload_dataloaders_every_n_epochs", reload_every)
    return StepFlags(
        log_every_n_steps=1 if fast else log_every, gradient_clip_val=clip_val,
        gradient_clip_algorithm=clip_algorithm, reload_dataloaders_every_n_epochs=reload_every,
    )  # fmt: skip


def parse_batch_limits(a: dict[str, Any], fast: int) -> BatchLimitFlags:
    """How many batches of each stage run: the limits, or what overfit_batches / fast_dev_run put instead."""
    given_overfit = a["overfit_batches"]
    overfit = _count_or_fraction("overfit_batches", given_overfit if given_overfit is not None else 0.0)
    # the limits that overfit_batches / fast_dev_run replace are not read, so not checked (as in Lightning)
    replaced = {"limit_train_batches", "limit_val_batches"} if overfit > 0 else set()
    if fast:
        replaced |= set(_LIMITS)
    limits = {name: 1.0 if name in replaced else _count_or_fraction(name, a[name]) for name in _LIMITS}
    for name in (*(n for n in _LIMITS if n not in replaced), "overfit_batches"):
        per_epoch = " per epoch" if name == "limit_train_batches" else ""
        _say_which_one(name, a[name], f"1 batch{per_epoch} will be used",
                       f"100% of the batches{per_epoch} will be used")  # fmt: skip
    if overfit > 0:
        # the same share of the training and of the validation data: the run still validates (on as many batches),
        # so monitored metrics and checkpoints work while overfitting
        limits["limit_train_batches"] = limits["limit_val_batches"] = overfit
    if fast:
        for key in limits:
            limits[key] = fast
        rank_zero_info(
            f"Running in `fast_dev_run` mode: will run the requested loop using {fast} batch(es). Logging and "
            "checkpointing is suppressed."
        )
    return BatchLimitFlags(
        limit_train_batches=limits["limit_train_batches"], limit_val_batches=limits["limit_val_batches"],
        limit_test_batches=limits["limit_test_batches"],
        limit_predict_batches=limits["limit_predict_batches"], overfit_batches=overfit,
    )  # fmt: skip


# -- what a run writes and shows -----------------------------------------------------------------------------
def parse_output_switches(a: dict[str, Any]) -> OutputSwitchFlags:
    """The logger and the callbacks the flags add, on or off (``barebones``: all off)."""
    logger, checkpointing, progress_bar, summary = (
        a["logger"], a["enable_checkpointing"], a["enable_progress_bar"], a["enable_model_summary"]
    )  # fmt: skip
    if a["barebones"]:
        _check_barebones(a)
        logger, checkpointing, progress_bar, summary = False, False, False, False
    return OutputSwitchFlags(
        logger=logger, enable_checkpointing=checkpointing is not False,
        enable_progress_bar=progress_bar is not False, enable_model_summary=summary is not False,
        enable_autolog_hparams=a["enable_autolog_hparams"], barebones=a["barebones"],
    )  # fmt: skip


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


def parse_default_root_dir(a: dict[str, Any]) -> str | None:
    """Where logs and checkpoints go: a reachable directory or URL (None: the working directory at the time)."""
    root = a["default_root_dir"]
    cloud_io.check_reachable(root, "Trainer(default_root_dir)")
    return cloud_io.local(root) if root is not None else None


def parse_output_objects(a: dict[str, Any]) -> OutputObjectFlags:
    """The callbacks as given, and the profiler."""
    return OutputObjectFlags(callbacks=_callback_list(a["callbacks"]), profiler=_profiler(a["profiler"]))


def _callback_list(callbacks: Any) -> list[Any]:
    from fulmen.core.hooks import Callback

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


# -- how a run runs ------------------------------------------------------------------------------------------
def parse_run_settings(a: dict[str, Any]) -> RunSettingFlags:
    """The torch settings a run holds, the sampler and compile flags."""
    deterministic = a["deterministic"]
    if deterministic not in (None, True, False, "warn"):
        raise MisconfigurationException(f"deterministic={deterministic!r} must be True, False, 'warn' or None.")
    # the on/off flags of every group, checked here together: their order is the order of the errors
    for name in _SWITCHES:
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
    return RunSettingFlags(
        deterministic=deterministic, benchmark=a["benchmark"], inference_mode=a["inference_mode"],
        detect_anomaly=a["detect_anomaly"], use_distributed_sampler=a["use_distributed_sampler"],
        matmul_precision=matmul, compile=a["compile"],
    )  # fmt: skip


# -- 1.x and compatibility -----------------------------------------------------------------------------------
def parse_compat(a: dict[str, Any]) -> CompatFlags:
    """The 1.x tuner and SWA flags, and model_registry (accepted with a warning, unused)."""
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
    return CompatFlags(
        auto_scale_batch_size="power" if scale is True else scale or None, auto_lr_find=a["auto_lr_find"],
        stochastic_weight_avg=a["stochastic_weight_avg"], model_registry=a["model_registry"],
    )  # fmt: skip


# -- hardware ------------------------------------------------------------------------------------------------
def parse_processes(a: dict[str, Any]) -> ProcessFlags:
    """How the run spreads over processes (the strategy itself is chosen by ``select_strategy``)."""
    check_int("num_nodes", a["num_nodes"], minimum=1)
    return ProcessFlags(strategy=a["strategy"], num_nodes=a["num_nodes"])


def parse_hardware(a: dict[str, Any]) -> HardwareFlags:
    """The accelerator, the precision and the plugins."""
    precision_plugin, checkpoint_io, cluster_environment, layer_sync = _from_plugins(
        a["plugins"], a["precision"], a["sync_batchnorm"]
    )
    precision = normalize_precision(a["precision"]) if precision_plugin is None else precision_plugin.name
    accelerator = select_accelerator(a["accelerator"])
    return HardwareFlags(
        accelerator=accelerator, precision=precision, precision_plugin=precision_plugin,
        checkpoint_io=checkpoint_io, cluster_environment=cluster_environment,
        sync_batchnorm=_is_sync_batchnorm(layer_sync), layer_sync=layer_sync,
    )  # fmt: skip


def parse_devices(a: dict[str, Any], accelerator: Accelerator) -> list[torch.device]:
    """This node's devices, one per process: ``devices=`` read against the machine the accelerator sees."""
    return accelerator.resolve_devices(a["devices"])


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

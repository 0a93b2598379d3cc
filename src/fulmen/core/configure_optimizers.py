"""What ``configure_optimizers`` may return, turned into optimizers and scheduler configs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import OneCycleLR

from fulmen.core.optimizer import _MockOptimizer
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_warn
from fulmen.utilities.types import LRSchedulerConfig

_SCHEDULER_KEYS = {"scheduler", "name", "interval", "frequency", "reduce_on_plateau", "monitor", "strict"}
_OPTIMIZER_DICT_KEYS = {"optimizer", "lr_scheduler", "frequency", "monitor"}
_FORMS = (
    "a single optimizer; a list/tuple of optimizers; two lists ([optimizers], [schedulers]); a dict with "
    "'optimizer' and optionally 'lr_scheduler' and 'monitor'; a list/tuple of such dicts; or None"
)


def _is_optimizer(obj: Any) -> bool:
    return isinstance(obj, Optimizer)


def _is_plateau(scheduler: Any) -> bool:
    from torch.optim.lr_scheduler import ReduceLROnPlateau

    return isinstance(scheduler, ReduceLROnPlateau)


def parse_configure_optimizers(
    returned: Any, manual: bool = False
) -> tuple[list[Optimizer], list[LRSchedulerConfig], list[int], str | None]:
    """Return (optimizers, scheduler configs, per-optimizer frequencies, top-level monitor).

    ``manual``: manual optimization, where the user steps the schedulers: no monitor is required, and
    the keys that say when the trainer steps them are ignored (with a warning).
    """
    optimizers, schedulers, frequencies, monitor = split_configure_optimizers(returned)
    configs = [scheduler_config(s, monitor, manual) for s in schedulers]
    _assign_opt_idx(configs, optimizers)
    return optimizers, configs, frequencies, monitor


def split_configure_optimizers(returned: Any) -> tuple[list[Optimizer], list[Any], list[int], str | None]:
    """What ``configure_optimizers`` returned, in parts: (optimizers, the scheduler entries as given (a scheduler
    or its dict; those of a list of dicts carry their optimizer's index as ``opt_idx``), per-optimizer
    frequencies, top-level monitor). :func:`scheduler_config` makes each entry a config."""
    optimizers: list[Optimizer]
    schedulers: list[Any] = []
    frequencies: list[int] = []
    monitor: str | None = None
    if returned is None:
        rank_zero_warn(
            "`configure_optimizers` returned None: this fit will run with no optimizer, so the weights won't change."
        )
        return [_MockOptimizer()], [], [], None
    if _is_optimizer(returned):
        optimizers = [returned]
    elif isinstance(returned, Mapping):
        _check_optimizer_dict(returned)
        optimizers = [returned["optimizer"]]
        monitor = returned.get("monitor")
        if returned.get("lr_scheduler") is not None:
            schedulers = [returned["lr_scheduler"]]
    elif (
        isinstance(returned, (list, tuple)) and len(returned) == 2 and isinstance(returned[0], (list, tuple))
    ):
        opts, scheds = returned
        optimizers = list(opts)
        schedulers = list(scheds) if isinstance(scheds, (list, tuple)) else [scheds]
    elif isinstance(returned, (list, tuple)) and returned and all(isinstance(d, Mapping) for d in returned):
        for d in returned:
            _check_optimizer_dict(d)
        optimizers = [d["optimizer"] for d in returned]
        for idx, d in enumerate(returned):
            sched = d.get("lr_scheduler")
            if sched is None:
                continue
            if isinstance(sched, Mapping):
                sched = {**sched, "opt_idx": idx}
                if d.get("monitor") is not None:
                    sched.setdefault("monitor", d["monitor"])
            else:
                sched = {"scheduler": sched, "opt_idx": idx, "monitor": d.get("monitor")}
            schedulers.append(sched)
        frequencies = _frequencies(returned)
    elif isinstance(returned, (list, tuple)) and returned and all(_is_optimizer(o) for o in returned):
        optimizers = list(returned)
    else:
        raise MisconfigurationException(
            f"Unknown configuration for model optimizers: configure_optimizers returned {_short(returned)}, which is "
            f"not a supported form. Return {_FORMS}."
        )
    for opt in optimizers:
        if not _is_optimizer(opt):
            raise MisconfigurationException(
                f"configure_optimizers returned {_short(opt)} where an optimizer was expected; every "
                "optimizer must be a torch.optim.Optimizer."
            )
    return optimizers, schedulers, frequencies, monitor


def _frequencies(dicts: Sequence[Mapping[str, Any]]) -> list[int]:
    """The 1.x optimizer ``frequency`` keys: all or none, each an int >= 1."""
    given = [d.get("frequency") for d in dicts]
    if all(f is None for f in given):
        return []
    if any(f is None for f in given):
        raise MisconfigurationException(
            f"configure_optimizers gave a 'frequency' to some optimizers only (frequencies: {given}). A "
            "frequency must be given to each optimizer, or to none."
        )
    for f in given:
        if not isinstance(f, int) or isinstance(f, bool) or f < 1:
            raise MisconfigurationException(
                f"configure_optimizers gave frequency={f!r}; an optimizer's frequency is the number of "
                "consecutive batches it runs on, an int >= 1."
            )
    return [int(f) for f in given]  # type: ignore[arg-type]


def _short(obj: Any) -> str:
    text = repr(obj)
    return f"{type(obj).__name__} {text[:80]}{'...' if len(text) > 80 else ''}"


def _check_optimizer_dict(d: Mapping[str, Any]) -> None:
    if "optimizer" not in d:
        raise MisconfigurationException(
            f"configure_optimizers returned a dict without an 'optimizer' key: keys were {sorted(d)}. "
            "Use {'optimizer': opt, 'lr_scheduler': scheduler_or_dict, 'monitor': 'metric'}."
        )
    extra = set(d) - _OPTIMIZER_DICT_KEYS
    if extra:
        rank_zero_warn(
            f"Found unsupported keys in the optimizer configuration: {_as_set(extra)}; configure_optimizers' "
            "dict keys other than optimizer / lr_scheduler / monitor are ignored.",
            category=RuntimeWarning,
        )


def scheduler_config(scheduler: Any, monitor: str | None, manual: bool = False) -> LRSchedulerConfig:
    """One scheduler entry (a scheduler, or its dict) as a checked config; ``monitor``: the top-level one."""
    if isinstance(scheduler, Mapping):
        if manual:
            _warn_manual_keys_ignored(scheduler)
        config = _config_from_dict(scheduler, monitor)
    else:
        config = LRSchedulerConfig(
            scheduler=scheduler, reduce_on_plateau=_is_plateau(scheduler), monitor=monitor
        )
    _check_config(config, manual)
    return config


def _warn_manual_keys_ignored(scheduler: Mapping[str, Any]) -> None:
    # `interval` is kept (a callback may read it); these decide when fulmen steps, which it does not here
    ignored = sorted(set(scheduler) & {"frequency", "monitor", "strict", "reduce_on_plateau"})
    if ignored:
        rank_zero_warn(
            f"The lr scheduler dict contains the key(s) {ignored}, but the keys will be ignored: in manual "
            "optimization call `self.lr_schedulers()` and `.step()` them in training_step when you want.",
            category=RuntimeWarning,
        )


def _config_from_dict(scheduler: Mapping[str, Any], monitor: str | None) -> LRSchedulerConfig:
    """A scheduler dict's keys checked (``scheduler`` required, ``interval``, ``frequency``) and turned into
    a config; ``monitor``: the top-level one, for a dict without its own."""
    if "scheduler" not in scheduler:
        raise MisconfigurationException(
            f'The lr scheduler dict must have the key "scheduler"; got keys {sorted(scheduler)}. Use '
            "{'scheduler': scheduler, 'interval': 'epoch' | 'step', 'frequency': 1, 'monitor': ...}."
        )
    extra = set(scheduler) - _SCHEDULER_KEYS - {"opt_idx"}
    if extra:
        rank_zero_warn(
            f"Found unsupported keys in the lr scheduler dict: {_as_set(extra)}. They are ignored. "
            f"Supported keys: {sorted(_SCHEDULER_KEYS)}.",
            category=RuntimeWarning,
        )
    interval = scheduler.get("interval", "epoch")
    if interval not in ("step", "epoch"):
        raise MisconfigurationException(
            f'The "interval" key in lr scheduler dict must be "step" or "epoch", but is {interval!r}.'
        )
    frequency = scheduler.get("frequency", 1)
    if not isinstance(frequency, int) or isinstance(frequency, bool) or frequency < 1:
        raise MisconfigurationException(
            f"The lr scheduler dict has frequency={frequency!r}; it must be an int >= 1."
        )
    sched = scheduler["scheduler"]
    return LRSchedulerConfig(
        scheduler=sched,
        name=scheduler.get("name"),
        interval=interval,
        frequency=frequency,
        reduce_on_plateau=scheduler.get("reduce_on_plateau", _is_plateau(sched)),
        monitor=scheduler.get("monitor", monitor),
        strict=scheduler.get("strict", True),
        opt_idx=scheduler.get("opt_idx"),
    )


def _check_config(config: LRSchedulerConfig, manual: bool) -> None:
    """What a config must satisfy whatever its form: a warning for OneCycleLR stepped per epoch, a monitor for
    ReduceLROnPlateau and a ``step()`` (both not needed in manual optimization, which steps it itself)."""
    if config.interval == "epoch" and isinstance(config.scheduler, OneCycleLR):
        # OneCycleLR's total_steps count optimizer steps: stepped per epoch it barely moves
        rank_zero_warn(
            "A `OneCycleLR` scheduler is using 'interval': 'epoch'. Are you sure you didn't mean 'interval': 'step'?",
            category=RuntimeWarning,
        )
    if config.reduce_on_plateau and config.monitor is None and not manual:
        raise MisconfigurationException(
            "`configure_optimizers` must include a monitor when a `ReduceLROnPlateau` scheduler is used: none was "
            "given. Return e.g. "
            "{'optimizer': optimizer, 'lr_scheduler': {'scheduler': scheduler, 'monitor': 'val_loss'}} "
            "from configure_optimizers."
        )
    if not hasattr(config.scheduler, "step") and not manual:  # manual optimization steps it itself, any way
        raise MisconfigurationException(
            f"The provided lr scheduler {_short(config.scheduler)} doesn't follow PyTorch's LRScheduler API: it has "
            "no .step(). Pass a torch.optim.lr_scheduler object (or any object with step() and optimizer), or "
            "step it yourself under manual optimization."
        )


def _as_set(keys: set[str]) -> str:
    return "{" + ", ".join(repr(k) for k in sorted(keys)) + "}"


def _assign_opt_idx(configs: Sequence[LRSchedulerConfig], optimizers: Sequence[Optimizer]) -> None:
    for config in configs:
        sched_opt = getattr(config.scheduler, "optimizer", None)
        if sched_opt is None:
            continue
        matches = [i for i, o in enumerate(optimizers) if o is sched_opt]
        if not matches:
            raise MisconfigurationException(
                f"The lr scheduler {type(config.scheduler).__name__} was attached with an optimizer that wasn't "
                "returned from configure_optimizers. Return that optimizer too."
            )
        config.opt_idx = matches[0]


# -- Lightning's private steps of the same parse, under its names (its tests and some libraries call them) -----
def _configure_optimizers(optim_conf: Any) -> tuple[list[Optimizer], list[Any], str | None]:
    """(optimizers, the scheduler entries as returned, the top-level monitor): the first half of the parse."""
    optimizers, schedulers, _, monitor = split_configure_optimizers(optim_conf)
    return optimizers, schedulers, monitor


def _configure_schedulers_automatic_opt(schedulers: list[Any], monitor: str | None) -> list[LRSchedulerConfig]:
    """Each scheduler entry as a config the trainer steps (``monitor``: the top-level one)."""
    return [scheduler_config(s, monitor) for s in schedulers]


def _configure_schedulers_manual_opt(schedulers: list[Any]) -> list[LRSchedulerConfig]:
    """Each scheduler entry as a config that manual optimization steps itself (stepping keys ignored)."""
    return [scheduler_config(s, None, manual=True) for s in schedulers]


def _init_optimizers_and_lr_schedulers(model: Any) -> tuple[list[Optimizer], list[LRSchedulerConfig]]:
    """``model.configure_optimizers()`` parsed: its optimizers and scheduler configs."""
    optimizers, configs, _, _ = parse_configure_optimizers(
        model.configure_optimizers(), manual=not model.automatic_optimization
    )
    return optimizers, configs

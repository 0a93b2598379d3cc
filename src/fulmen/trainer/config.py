"""Every Trainer flag is parsed and validated here, once, before anything runs.

Errors name the flag, show the value received, and say what is allowed.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any

from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

_CLIP_ALGORITHMS = ("norm", "value")
_TIME_UNITS = ("days", "hours", "minutes", "seconds", "milliseconds", "microseconds", "weeks")


def parse_time(value: Any, flag: str = "max_time") -> datetime.timedelta | None:
    """'DD:HH:MM:SS', a dict of timedelta keywords, or a timedelta."""
    if value is None or isinstance(value, datetime.timedelta):
        return value
    if isinstance(value, dict):
        bad = [k for k in value if k not in _TIME_UNITS]
        if bad:
            raise MisconfigurationException(
                f"{flag}={value!r} has keys {bad} that are not time units. Use keys from {list(_TIME_UNITS)}, "
                'e.g. {"days": 1, "hours": 5}.'
            )
        return datetime.timedelta(**value)
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+):(\d{1,2}):(\d{1,2}):(\d{1,2})\s*", value)
        if match:
            d, h, m, s = (int(x) for x in match.groups())
            return datetime.timedelta(days=d, hours=h, minutes=m, seconds=s)
    raise MisconfigurationException(
        f"{flag}={value!r} is not understood. Use a 'DD:HH:MM:SS' string (e.g. '00:12:00:00'), a dict like "
        '{"days": 1, "hours": 5}, or a datetime.timedelta.'
    )


def _nonneg_int(name: str, value: Any, allow_none: bool = True, minimum: int = 0) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise MisconfigurationException(f"{name}={value!r} must be an int >= {minimum}.")
    return value


def _limit(name: str, value: Any) -> int | float:
    """limit_*_batches / overfit_batches: an int count or a float fraction in [0, 1]."""
    if value is None:
        return 1.0
    if isinstance(value, bool):
        raise MisconfigurationException(
            f"{name}={value!r} must be an int number of batches or a float in [0.0, 1.0]."
        )
    if isinstance(value, int):
        if value < 0:
            raise MisconfigurationException(f"{name}={value!r} must be >= 0 (an int counts batches).")
        return value
    if isinstance(value, float):
        if not 0.0 <= value <= 1.0:
            raise MisconfigurationException(
                f"{name}={value!r} is a fraction outside [0.0, 1.0]. Use a float in that range, or an int "
                "number of batches."
            )
        return value
    raise MisconfigurationException(
        f"{name}={value!r} must be an int number of batches or a float in [0.0, 1.0]."
    )


@dataclass
class LoopConfig:
    """The validated loop-control flags (the Trainer keeps one of these)."""

    max_epochs: int
    min_epochs: int | None
    max_steps: int
    min_steps: int | None
    max_time: datetime.timedelta | None
    limit_train_batches: int | float
    limit_val_batches: int | float
    limit_test_batches: int | float
    limit_predict_batches: int | float
    overfit_batches: int | float
    val_check_interval: int | float
    check_val_every_n_epoch: int | None
    num_sanity_val_steps: int | float
    log_every_n_steps: int
    accumulate_grad_batches: int
    gradient_clip_val: int | float | None
    gradient_clip_algorithm: str | None
    reload_dataloaders_every_n_epochs: int
    fast_dev_run: int | bool


def parse_loop_flags(
    *,
    fast_dev_run: int | bool,
    max_epochs: int | None,
    min_epochs: int | None,
    max_steps: int,
    min_steps: int | None,
    max_time: Any,
    limit_train_batches: Any,
    limit_val_batches: Any,
    limit_test_batches: Any,
    limit_predict_batches: Any,
    overfit_batches: Any,
    val_check_interval: Any,
    check_val_every_n_epoch: int | None,
    num_sanity_val_steps: int | None,
    log_every_n_steps: int | None,
    accumulate_grad_batches: int,
    gradient_clip_val: Any,
    gradient_clip_algorithm: str | None,
    reload_dataloaders_every_n_epochs: int,
) -> LoopConfig:
    if isinstance(fast_dev_run, bool) or fast_dev_run is None:
        fast = int(bool(fast_dev_run))
    elif isinstance(fast_dev_run, int) and fast_dev_run >= 0:
        fast = fast_dev_run
    else:
        raise MisconfigurationException(
            f"fast_dev_run={fast_dev_run!r} must be a bool or an int >= 0 (the number of batches to run)."
        )

    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < -1:
        raise MisconfigurationException(f"max_steps={max_steps!r} must be an int >= -1 (-1 means no limit).")
    if max_epochs is not None and (
        isinstance(max_epochs, bool) or not isinstance(max_epochs, int) or max_epochs < -1
    ):
        raise MisconfigurationException(
            f"max_epochs={max_epochs!r} must be an int >= -1 (-1 means no limit)."
        )
    _nonneg_int("min_epochs", min_epochs)
    _nonneg_int("min_steps", min_steps)
    parsed_time = parse_time(max_time)
    if max_epochs is None:
        if max_steps == -1 and parsed_time is None and not fast_dev_run:
            max_epochs = 1000
            rank_zero_warn(
                "Neither max_epochs nor max_steps is set: training stops after max_epochs=1000. "
                "Set Trainer(max_epochs=...) to choose, or max_epochs=-1 to train without an epoch limit."
            )
        else:
            max_epochs = -1
    if min_epochs is not None and max_epochs != -1 and min_epochs > max_epochs:
        raise MisconfigurationException(
            f"min_epochs={min_epochs!r} is larger than max_epochs={max_epochs!r}."
        )

    if check_val_every_n_epoch is not None:
        _nonneg_int("check_val_every_n_epoch", check_val_every_n_epoch, minimum=1)
    vci = val_check_interval
    if vci is None:
        vci = 1.0
    elif isinstance(vci, bool) or not isinstance(vci, (int, float)):
        raise MisconfigurationException(
            f"val_check_interval={val_check_interval!r} must be a float in (0.0, 1.0] (a fraction of the "
            "training epoch) or an int >= 1 (a number of training batches)."
        )
    elif isinstance(vci, float) and not 0.0 < vci <= 1.0:
        raise MisconfigurationException(
            f"val_check_interval={vci!r} is out of range: a float must be in (0.0, 1.0] (a fraction of the "
            "training epoch). For a number of batches pass an int."
        )
    elif isinstance(vci, int) and vci < 1:
        raise MisconfigurationException(
            f"val_check_interval={vci!r} must be >= 1 when it is an int (batches)."
        )

    if num_sanity_val_steps is None:
        sanity: int | float = 2
    elif num_sanity_val_steps == -1:
        sanity = float("inf")
    else:
        sanity = _nonneg_int("num_sanity_val_steps", num_sanity_val_steps) or 0

    if log_every_n_steps is None:
        log_every = 50
    else:
        log_every = _nonneg_int("log_every_n_steps", log_every_n_steps) or 0

    if (
        isinstance(accumulate_grad_batches, bool)
        or not isinstance(accumulate_grad_batches, int)
        or accumulate_grad_batches < 1
    ):
        raise MisconfigurationException(
            f"accumulate_grad_batches={accumulate_grad_batches!r} must be an int >= 1, or a dict "
            "{epoch: factor} for a schedule (see the GradientAccumulationScheduler callback)."
        )
    if gradient_clip_val is not None and (
        isinstance(gradient_clip_val, bool)
        or not isinstance(gradient_clip_val, (int, float))
        or gradient_clip_val < 0
    ):
        raise MisconfigurationException(
            f"gradient_clip_val={gradient_clip_val!r} must be a number >= 0 (0 or None disables clipping)."
        )
    if gradient_clip_algorithm is not None:
        if (
            not isinstance(gradient_clip_algorithm, str)
            or gradient_clip_algorithm.lower() not in _CLIP_ALGORITHMS
        ):
            raise MisconfigurationException(
                f"gradient_clip_algorithm={gradient_clip_algorithm!r} is not supported. Use 'norm' or 'value'."
            )
        gradient_clip_algorithm = gradient_clip_algorithm.lower()
    _nonneg_int("reload_dataloaders_every_n_epochs", reload_dataloaders_every_n_epochs, allow_none=False)

    limits = {
        "limit_train_batches": _limit("limit_train_batches", limit_train_batches),
        "limit_val_batches": _limit("limit_val_batches", limit_val_batches),
        "limit_test_batches": _limit("limit_test_batches", limit_test_batches),
        "limit_predict_batches": _limit("limit_predict_batches", limit_predict_batches),
    }
    overfit = _limit("overfit_batches", overfit_batches if overfit_batches is not None else 0.0)
    if overfit > 0:
        limits["limit_train_batches"] = overfit
        limits["limit_val_batches"] = 0 if isinstance(overfit, int) else 0.0

    if fast:
        for key in limits:
            limits[key] = fast
        max_steps = fast
        max_epochs = 1
        sanity = 0
        log_every = 1
        vci = 1.0
        check_val_every_n_epoch = 1
        rank_zero_info(f"fast_dev_run={fast_dev_run!r}: running {fast} batch(es) of each stage, no logging.")

    return LoopConfig(
        max_epochs=max_epochs,
        min_epochs=min_epochs,
        max_steps=max_steps,
        min_steps=min_steps,
        max_time=parsed_time,
        overfit_batches=overfit,
        val_check_interval=vci,
        check_val_every_n_epoch=check_val_every_n_epoch,
        num_sanity_val_steps=sanity,
        log_every_n_steps=log_every,
        accumulate_grad_batches=accumulate_grad_batches,
        gradient_clip_val=gradient_clip_val,
        gradient_clip_algorithm=gradient_clip_algorithm,
        reload_dataloaders_every_n_epochs=reload_dataloaders_every_n_epochs,
        fast_dev_run=fast_dev_run if fast else False,
        **limits,
    )

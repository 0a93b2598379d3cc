"""The checks of ``ModelCheckpoint``'s arguments (what to keep, when to save), made before the callback is set up.

Each wrong argument raises a ``MisconfigurationException`` with Lightning's meaning, in the order the arguments
are checked here.
"""

from __future__ import annotations

import datetime

from fulmen.utilities.exceptions import MisconfigurationException


def check_save_arguments(
    *, monitor: str | None, save_last: bool | str | None, save_top_k: int, mode: str,
    every_n_train_steps: int | None, every_n_epochs: int | None, train_time_interval: datetime.timedelta | None,
) -> list[str]:  # fmt: skip
    """Raise for an invalid argument; return the names of the save triggers set (at most one)."""
    if mode not in ("min", "max"):
        raise MisconfigurationException(f"ModelCheckpoint(mode={mode!r}): `mode` can be 'min' or 'max', but got {mode}.")
    if not isinstance(save_top_k, int) or isinstance(save_top_k, bool) or save_top_k < -1:
        raise MisconfigurationException(
            f"ModelCheckpoint(save_top_k={save_top_k!r}) is invalid. Must be >= -1 (-1 keeps every checkpoint)."
        )
    if monitor is None and save_top_k not in (-1, 0, 1):
        raise MisconfigurationException(
            f"ModelCheckpoint(save_top_k={save_top_k}, monitor=None) is not a valid configuration: without a "
            "monitored metric there is no "
            "ranking to keep the top k by. Set monitor='<logged metric>' or save_top_k to -1, 0 or 1."
        )
    if save_last not in (None, True, False, "link"):
        raise MisconfigurationException(
            f"ModelCheckpoint(save_last={save_last!r}) must be a bool or 'link'."
        )
    for name, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise MisconfigurationException(
                f"ModelCheckpoint({name}={value!r}) is invalid. Must be >= 0 (an int), or None."
            )
    if train_time_interval is not None and not isinstance(train_time_interval, datetime.timedelta):
        raise MisconfigurationException(
            f"ModelCheckpoint(train_time_interval={train_time_interval!r}) must be a datetime.timedelta."
        )
    set_triggers = [
        n for n, v in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs),
                       ("train_time_interval", train_time_interval)) if v
    ]  # fmt: skip
    if len(set_triggers) > 1:
        raise MisconfigurationException(
            "Combination of parameters every_n_train_steps, every_n_epochs and train_time_interval should be "
            f"mutually exclusive, but ModelCheckpoint got {', '.join(set_triggers)}. Keep one."
        )
    return set_triggers

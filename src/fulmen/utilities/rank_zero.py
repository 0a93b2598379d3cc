"""Run or print things on global rank zero only.

The rank is read from the environment variables that launchers set, so that it is right even before a
process group exists (rank-zero-only work may happen while the trainer is still being built).

``stacklevel`` counts from the caller of ``rank_zero_warn`` / ``rank_zero_info`` ...: the default attributes
the warning or log record to the line that called it, whatever the layers in between.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from fulmen.utilities.warnings import LightningDeprecationWarning

log = logging.getLogger("fulmen")

T = TypeVar("T")


def _rank_from_env() -> int:
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK"):
        value = os.environ.get(key)
        if value is not None:
            return int(value)
    return 0


def rank_zero_only(fn: Callable[..., T], default: T | None = None) -> Callable[..., T | None]:
    """Decorator: call ``fn`` on global rank zero only; other ranks get ``default``.

    ``rank_zero_only.rank`` holds the rank used for the decision; strategies update it once the process
    group is known.
    """

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> T | None:
        if getattr(rank_zero_only, "rank", 0) == 0:
            return fn(*args, **kwargs)
        return default

    return wrapped


rank_zero_only.rank = _rank_from_env()  # type: ignore[attr-defined]


# Each public function below is `rank_zero_only(f)` calling one of these: the frames between a caller and
# `warnings.warn` / `log.info` are always the same three, which the default stacklevels count on.
def _warn(message: str | Warning, stacklevel: int = 2, **kwargs: Any) -> None:
    warnings.warn(message, stacklevel=stacklevel, **kwargs)


def _log(level: int, *args: Any, stacklevel: int = 2, **kwargs: Any) -> None:
    # `log` is looked up at call time: `rank_zero_module.log = logging.getLogger(...)` redirects the messages
    log.log(level, *args, stacklevel=stacklevel, **kwargs)


@rank_zero_only
def rank_zero_warn(message: str | Warning, stacklevel: int = 4, **kwargs: Any) -> None:
    """``warnings.warn(message, **kwargs)`` on global rank zero (``category=`` and the like go in kwargs)."""
    _warn(message, stacklevel=stacklevel, **kwargs)


def rank_zero_deprecation(message: str | Warning, stacklevel: int = 5, **kwargs: Any) -> None:
    """A :class:`LightningDeprecationWarning` (or ``category=``) on global rank zero."""
    category = kwargs.pop("category", LightningDeprecationWarning)
    rank_zero_warn(message, stacklevel=stacklevel, category=category, **kwargs)


@rank_zero_only
def rank_zero_info(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    _log(logging.INFO, *args, stacklevel=stacklevel, **kwargs)


@rank_zero_only
def rank_zero_debug(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    _log(logging.DEBUG, *args, stacklevel=stacklevel, **kwargs)


@rank_zero_only
def rank_zero_error(*args: Any, stacklevel: int = 4, **kwargs: Any) -> None:
    _log(logging.ERROR, *args, stacklevel=stacklevel, **kwargs)


def rank_prefixed_message(message: str, rank: int | None) -> str:
    """``"[rank: 1] message"``; the message as it is when ``rank`` is None (not known)."""
    return message if rank is None else f"[rank: {rank}] {message}"


class WarningCache(set):
    """Emits each distinct message once (on global rank zero)."""

    def warn(self, message: str, stacklevel: int = 5, **kwargs: Any) -> None:
        if message not in self:
            self.add(message)
            rank_zero_warn(message, stacklevel=stacklevel, **kwargs)

    def deprecation(self, message: str, stacklevel: int = 6, **kwargs: Any) -> None:
        if message not in self:
            self.add(message)
            rank_zero_deprecation(message, stacklevel=stacklevel, **kwargs)

    def info(self, message: str, stacklevel: int = 5, **kwargs: Any) -> None:
        if message not in self:
            self.add(message)
            rank_zero_info(message, stacklevel=stacklevel, **kwargs)


# This module, by the name programs use to redirect the messages: `rank_zero_module.log = my_logger`.
rank_zero_module = sys.modules[__name__]

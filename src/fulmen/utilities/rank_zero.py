"""Run or print things on global rank zero only.

The rank is read from the environment variables that launchers set, so that it is right even before a
process group exists (rank-zero-only work may happen while the trainer is still being built).
"""

from __future__ import annotations

import functools
import logging
import os
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


@rank_zero_only
def rank_zero_warn(
    message: str | Warning, category: type[Warning] = UserWarning, stacklevel: int = 4
) -> None:
    warnings.warn(message, category=category, stacklevel=stacklevel)


@rank_zero_only
def rank_zero_deprecation(message: str | Warning, stacklevel: int = 5) -> None:
    warnings.warn(message, category=LightningDeprecationWarning, stacklevel=stacklevel)


@rank_zero_only
def rank_zero_info(*args: Any, **kwargs: Any) -> None:
    log.info(*args, **kwargs)


@rank_zero_only
def rank_zero_error(*args: Any, **kwargs: Any) -> None:
    log.error(*args, **kwargs)


@rank_zero_only
def rank_zero_debug(*args: Any, **kwargs: Any) -> None:
    log.debug(*args, **kwargs)


class WarningCache(set):  # type: ignore[type-arg]
    """Emits each distinct message once."""

    def warn(self, message: str, category: type[Warning] = UserWarning) -> None:
        if message not in self:
            self.add(message)
            rank_zero_warn(message, category=category, stacklevel=5)

    def info(self, message: str) -> None:
        if message not in self:
            self.add(message)
            rank_zero_info(message)

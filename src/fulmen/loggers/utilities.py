"""Helpers loggers share: the version string of several loggers together, and the checkpoints a logger has
not uploaded yet."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.utilities import cloud_io
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases

if TYPE_CHECKING:
    from fulmen.loggers.logger import Logger


def _version(loggers: list[Logger], separator: str = "_") -> int | str:
    """One logger's version as it is; several loggers' distinct versions joined with ``separator`` (``"1_x"``),
    so that a folder named after them is the same for the same set of runs."""
    if len(loggers) == 1:
        return loggers[0].version  # type: ignore[return-value]
    versions = dict.fromkeys(str(logger.version) for logger in loggers)  # distinct, in order
    return separator.join(versions)


def _scan_checkpoints(checkpoint_callback: Any, logged_model_time: dict[str, float]) -> list[tuple[float, str, Any, str]]:
    """The files of ``checkpoint_callback`` (its last, best and top-k checkpoints) not logged since they were
    last written (``logged_model_time``: path -> modification time when it was logged), oldest first, as
    ``(mtime, path, score, tag)``: tag ``"latest"``, ``"best"`` or ``"best_k"``, the last that applies."""
    tagged: dict[str, tuple[Any, str]] = {}
    last = getattr(checkpoint_callback, "last_model_path", "")
    if last:
        tagged[last] = (getattr(checkpoint_callback, "current_score", None), "latest")
    best = getattr(checkpoint_callback, "best_model_path", "")
    if best:
        tagged[best] = (getattr(checkpoint_callback, "best_model_score", None), "best")
    for path, score in (getattr(checkpoint_callback, "best_k_models", None) or {}).items():
        tagged[path] = (score, "best_k")
    found = []
    for path, (score, tag) in tagged.items():
        if not path or not cloud_io.isfile(path):
            continue
        mtime = cloud_io.modified(path)
        if path in logged_model_time and logged_model_time[path] >= mtime:
            continue
        found.append((mtime, path, score, tag))
    return sorted(found, key=lambda item: item[0])


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "Checkpoint": "fulmen.callbacks.checkpoint.Checkpoint",
})  # fmt: skip

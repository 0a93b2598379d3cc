"""``lightning.pytorch.loops.progress``: a fit run's counters and position are one
:class:`~fulmen.runtime.state.FitProgress` (with its :class:`~fulmen.runtime.state.AccumulationWindow`,
:class:`~fulmen.runtime.state.SchedulerSteps` and :class:`~fulmen.runtime.state.LoopPhase`).
:func:`fulmen.loops.resume.loops_state_dict` writes them in the checkpoint as Lightning's progress trackers,
so files move both ways."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fulmen.loops.resume import loops_state_dict, progress_counters
from fulmen.runtime.state import AccumulationWindow, FitProgress, LoopPhase, SchedulerSteps

__all__ = [
    "AccumulationWindow", "FitProgress", "LoopPhase", "Progress", "ProgressCounts", "SchedulerSteps",
    "loops_state_dict", "progress_counters", "progress_view",
]  # fmt: skip


class ProgressCounts:
    """One of Lightning's progress trackers (``ready``, ``started``, ``processed``, ``completed``), read from
    fulmen's counters when an attribute is read: a view, never a second copy of the count."""

    def __init__(self, read: Callable[[], dict[str, int]]) -> None:
        self._read = read

    def __getattr__(self, name: str) -> int:
        counts = self._read()
        if name in counts:
            return counts[name]
        raise AttributeError(f"{type(self).__name__} has no counter {name!r} (it has {sorted(counts)})")

    def state_dict(self) -> dict[str, int]:
        return dict(self._read())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._read()})"


class Progress:
    """Lightning's ``_Progress`` / ``_BatchProgress`` as a view of the running fit: ``current`` counts this epoch,
    ``total`` the run (``trainer.fit_loop.epoch_progress.current.completed``,
    ``trainer.fit_loop.epoch_loop.batch_progress.is_last_batch``), computed from fulmen's counters and loop phase
    by :func:`~fulmen.loops.resume.progress_counters`, which also writes them into checkpoints."""

    def __init__(self, read: Callable[[], dict[str, Any]]) -> None:
        self._read = read
        self.current = ProgressCounts(lambda: self._read()["current"])
        self.total = ProgressCounts(lambda: self._read()["total"])

    @property
    def is_last_batch(self) -> bool:
        return bool(self._read().get("is_last_batch", False))

    def state_dict(self) -> dict[str, Any]:
        return self._read()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._read()})"


def progress_view(progress: FitProgress, is_last_batch: Callable[[], bool], tracker: str) -> Progress:
    """The view of one tracker (``"epoch_progress"``, ``"batch_progress"``, ``"scheduler_progress"``)."""
    return Progress(lambda: progress_counters(progress, is_last_batch())[tracker])

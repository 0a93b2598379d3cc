"""``lightning.pytorch.loops.progress``: a fit run's counters and position are one
:class:`~fulmen.runtime.state.FitProgress` (with its :class:`~fulmen.runtime.state.AccumulationWindow`,
:class:`~fulmen.runtime.state.SchedulerSteps` and :class:`~fulmen.runtime.state.LoopPhase`).
:func:`fulmen.loops.resume.loops_state_dict` writes them in the checkpoint as Lightning's progress trackers,
so files move both ways."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fulmen.loops.resume import loops_state_dict, progress_counters, write_progress_counter
from fulmen.runtime.state import AccumulationWindow, FitProgress, LoopPhase, SchedulerSteps

__all__ = [
    "AccumulationWindow", "EvaluationProgress", "FitProgress", "LoopPhase", "OptimizationProgress", "OptimizerProgress", "Progress",
    "ProgressCounts", "SchedulerSteps",
    "loops_state_dict", "progress_counters", "progress_view", "write_progress_counter",
]  # fmt: skip


class ProgressCounts:
    """One of Lightning's progress trackers (``ready``, ``started``, ``processed``, ``completed``), read from
    fulmen's counters when an attribute is read and written to them when one is set: a view, never a second
    copy of the count."""

    _read: Callable[[], dict[str, int]]
    _write: Callable[[str, int], None]

    def __init__(self, read: Callable[[], dict[str, int]], write: Callable[[str, int], None]) -> None:
        object.__setattr__(self, "_read", read)
        object.__setattr__(self, "_write", write)

    def __getattr__(self, name: str) -> int:
        counts = self._read()
        if name in counts:
            return counts[name]
        raise AttributeError(f"{type(self).__name__} has no counter {name!r} (it has {sorted(counts)})")

    def __setattr__(self, name: str, value: int) -> None:
        self._write(name, value)

    def reset(self) -> None:
        """Every counter to 0 (libraries reset the trackers before a new ``fit`` on the same trainer)."""
        for name in self._read():
            self._write(name, 0)

    def increment(self, counter: str) -> None:
        self._write(counter, self._read()[counter] + 1)

    def state_dict(self) -> dict[str, int]:
        return dict(self._read())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._read()})"


class Progress:
    """Lightning's ``_Progress`` / ``_BatchProgress`` as a view of the running fit: ``current`` counts this epoch,
    ``total`` the run (``trainer.fit_loop.epoch_progress.current.completed``,
    ``trainer.fit_loop.epoch_loop.batch_progress.is_last_batch``), computed from fulmen's counters and loop phase
    by :func:`~fulmen.loops.resume.progress_counters`, which also writes them into checkpoints; a counter set
    here moves fulmen's counter behind it (:func:`~fulmen.loops.resume.write_progress_counter`)."""

    def __init__(
        self, read: Callable[[], dict[str, Any]], write: Callable[[str, str, int], None] | None = None
    ) -> None:
        self._read = read

        def writer(scope: str) -> Callable[[str, int], None]:
            def write_counter(counter: str, value: int) -> None:
                if write is None:
                    raise AttributeError("this progress tracker is read-only")
                write(scope, counter, value)

            return write_counter

        self.current = ProgressCounts(lambda: self._read()["current"], writer("current"))
        self.total = ProgressCounts(lambda: self._read()["total"], writer("total"))

    @property
    def is_last_batch(self) -> bool:
        return bool(self._read().get("is_last_batch", False))

    def reset(self) -> None:
        self.total.reset()
        self.current.reset()

    def reset_on_run(self) -> None:
        """The ``current`` counts start again (a new epoch or run); ``total`` goes on."""
        self.current.reset()

    def increment_ready(self) -> None:
        self._increment("ready")

    def increment_started(self) -> None:
        self._increment("started")

    def increment_processed(self) -> None:
        self._increment("processed")

    def increment_completed(self) -> None:
        self._increment("completed")

    def _increment(self, counter: str) -> None:
        self.total.increment(counter)
        self.current.increment(counter)

    def state_dict(self) -> dict[str, Any]:
        return self._read()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._read()})"


def progress_view(progress: FitProgress, is_last_batch: Callable[[], bool], tracker: str) -> Progress:
    """The view of one tracker (``"epoch_progress"``, ``"batch_progress"``, ``"scheduler_progress"``,
    ``"optimizer_step"``, ``"zero_grad"``), readable and writable."""
    return Progress(
        lambda: progress_counters(progress, is_last_batch())[tracker],
        lambda scope, counter, value: write_progress_counter(progress, is_last_batch(), tracker, scope, counter, value),
    )


class OptimizerProgress:
    """Lightning's ``_OptimizerProgress``: the ``step`` and ``zero_grad`` trackers of the optimizers."""

    def __init__(self, progress: FitProgress) -> None:
        self.step = progress_view(progress, lambda: False, "optimizer_step")
        self.zero_grad = progress_view(progress, lambda: False, "zero_grad")

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step.state_dict(), "zero_grad": self.zero_grad.state_dict()}


class OptimizationProgress:
    """Lightning's ``_OptimizationProgress`` (``epoch_loop.automatic_optimization.optim_progress``): libraries read
    ``optimizer_steps``, the optimizer steps taken in the run."""

    def __init__(self, progress: FitProgress) -> None:
        self.optimizer = OptimizerProgress(progress)

    @property
    def optimizer_steps(self) -> int:
        return int(self.optimizer.step.total.completed)

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}


class EvaluationProgress:
    """The batch counts of one evaluation or prediction run (every dataloader's batches, in order), kept by the
    loop as it goes: a batch is ready before its start hooks, started and processed after its step, completed
    after its end hooks. Lightning's ``trainer.validate_loop.batch_progress`` reads them (``current`` and
    ``total`` alike: both start again with each run)."""

    __slots__ = ("completed", "is_last_batch", "processed", "ready")

    def __init__(self) -> None:
        self.start_run()

    def start_run(self) -> None:
        self.ready = self.processed = self.completed = 0
        self.is_last_batch = False

    def view(self) -> Progress:
        def read() -> dict[str, Any]:
            counts = {"ready": self.ready, "started": self.processed, "processed": self.processed,
                      "completed": self.completed}  # fmt: skip
            return {"total": counts, "current": dict(counts), "is_last_batch": self.is_last_batch}

        return Progress(read)


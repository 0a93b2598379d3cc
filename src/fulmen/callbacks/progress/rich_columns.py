"""The rich progress columns of ``RichProgressBar`` (``CustomProgress``, ``CustomBarColumn``,
``BatchesProcessedColumn``, ``CustomTimeColumn``, ``ProcessingSpeedColumn``, ``MetricsTextColumn``,
``CustomInfiniteTask``): classes deriving from rich's, so this module imports ``rich``. The bar's module loads it
on first use, so that importing fulmen's callbacks never imports rich."""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID
from rich.progress_bar import ProgressBar as RichBar
from rich.text import Text

from fulmen.callbacks.progress.rich_progress import _format_metrics, _is_finite

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer


class CustomBarColumn(BarColumn):
    """rich's bar column, which also draws a task of unknown or infinite total (a loader without a
    length): as a pulsing bar."""

    def render(self, task: Task) -> RichBar:
        finite = _is_finite(task.total)
        return RichBar(
            total=max(0.0, task.total) if finite else None,  # type: ignore[type-var]
            completed=max(0.0, task.completed),
            width=None if self.bar_width is None else max(1, self.bar_width),
            pulse=not task.started or not finite,
            animation_time=task.get_time(),
            style=self.style,
            complete_style=self.complete_style,
            finished_style=self.finished_style,
            pulse_style=self.pulse_style,
        )


@dataclass
class CustomInfiniteTask(Task):
    """A task of infinite total: it has no time remaining (rich's estimate would divide infinity)."""

    @property
    def time_remaining(self) -> float | None:
        return None


class CustomProgress(Progress):
    """rich's ``Progress`` that also takes tasks of infinite total (``add_task(total=float("inf"))``)."""

    def add_task(
        self,
        description: str,
        start: bool = True,
        total: float | None = 100.0,
        completed: int = 0,
        visible: bool = True,
        **fields: Any,
    ) -> TaskID:
        if total is not None and math.isinf(total):
            task = CustomInfiniteTask(
                self._task_index, description, total, completed, visible=visible, fields=fields,
                _get_time=self.get_time, _lock=self._lock,
            )  # fmt: skip
            return self.add_custom_task(task, start=start)
        return super().add_task(description, start, total, completed, visible, **fields)

    def add_custom_task(self, task: Task, start: bool = True) -> TaskID:
        """Add a task made elsewhere (its id must be the next one, ``self._task_index``)."""
        with self._lock:
            task_id = self._task_index
            self._tasks[task_id] = task
            if start:
                self.start_task(task_id)
            self._task_index = TaskID(int(task_id) + 1)
        self.refresh()
        return task_id

    def soft_refresh(self) -> None:
        """Redraw, unless a refresh thread (``auto_refresh=True``) draws on its own schedule."""
        if not self.live.auto_refresh:
            self.refresh()


class CustomTimeColumn(ProgressColumn):
    """``elapsed • remaining`` (``-:--:--`` where unknown), redrawn twice a second at most."""

    max_refresh = 0.5

    def __init__(self, style: Any) -> None:
        self.style = style
        super().__init__()

    def render(self, task: Task) -> Text:
        elapsed = task.finished_time if task.finished else task.elapsed
        remaining = task.time_remaining

        def show(seconds: float | None) -> str:
            return "-:--:--" if seconds is None else str(datetime.timedelta(seconds=int(seconds)))

        return Text(f"{show(elapsed)} • {show(remaining)}", style=self.style)


class BatchesProcessedColumn(ProgressColumn):
    """``done/total`` batches (``--`` for a total that is not known)."""

    def __init__(self, style: Any) -> None:
        self.style = style
        super().__init__()

    def render(self, task: Task) -> Text:
        total = task.total
        shown = (int(total) if float(total).is_integer() else total) if _is_finite(total) else "--"  # type: ignore[arg-type]
        return Text(f"{int(task.completed)}/{shown}", style=self.style)


class ProcessingSpeedColumn(ProgressColumn):
    """Batches per second (rich's estimate over the last half minute)."""

    def __init__(self, style: Any) -> None:
        self.style = style
        super().__init__()

    def render(self, task: Task) -> Text:
        speed = f"{task.speed:>.2f}" if task.speed is not None else "0.00"
        return Text(f"{speed}it/s", style=self.style)


class MetricsTextColumn(ProgressColumn):
    """The metrics last given to :meth:`update`, on the training bar's row while fitting (other rows and
    stages: empty). Rendering never reads metrics itself: they are read where it is safe, then handed over."""

    def __init__(self, trainer: Trainer, style: Any, text_delimiter: str, metrics_format: str) -> None:
        self._trainer = trainer
        self._style = style
        self._text_delimiter = text_delimiter
        self._metrics_format = metrics_format
        self._metrics: dict[Any, Any] = {}
        super().__init__()

    def update(self, metrics: dict[Any, Any]) -> None:
        self._metrics = metrics

    def render(self, task: Task) -> Text:
        trainer = self._trainer
        fn = trainer.state.fn
        bar = trainer.progress_bar_callback
        if (
            getattr(fn, "value", fn) != "fit"
            or trainer.sanity_checking
            or getattr(bar, "train_progress_bar_id", None) != task.id
        ):
            return Text()
        text = _format_metrics(self._metrics, self._text_delimiter, self._metrics_format)
        return Text(text, justify="left", style=self._style)

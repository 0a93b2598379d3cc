"""``RichProgressBar``: the progress display drawn with ``rich`` (``pip install 'fulmen[rich]'``), and the rich
columns it is made of (``CustomProgress``, ``CustomBarColumn``, ``BatchesProcessedColumn``,
``CustomTimeColumn``, ``ProcessingSpeedColumn``, ``MetricsTextColumn``, ``CustomInfiniteTask``), for
``configure_columns`` overrides and other displays.

Importing this module does not import ``rich``: the column classes derive from rich's and are built on first
access, and ``RichProgressBar`` imports rich when it is made.

The display redraws at most ``refresh_rate`` times a second, in the training process (no drawing thread),
and reads the metrics it shows at most ten times a second (each read may wait for the device). Written to a
file or a pipe (not a terminal), ``rich`` does not animate: the final state of the display is printed once
when it stops, never a line per batch.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fulmen.callbacks.progress.progress_bar import ProgressBar as ProgressBar
from fulmen.callbacks.progress.progress_bar import RefreshingBar
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.imports import _RICH_AVAILABLE as _RICH_AVAILABLE
from fulmen.utilities.imports import require

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

_RICH_CLASSES = (
    "BatchesProcessedColumn", "CustomBarColumn", "CustomInfiniteTask", "CustomProgress", "CustomTimeColumn",
    "MetricsTextColumn", "ProcessingSpeedColumn",
)  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _RICH_CLASSES:
        return _rich_classes()[name]
    if name == "Progress":  # rich's, which Lightning's module holds: the bar's CustomProgress derives from it
        from rich.progress import Progress

        return Progress
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _is_finite(total: float | None) -> bool:
    return total is not None and math.isfinite(total)


def _format_metrics(metrics: dict[str, Any], delimiter: str, metrics_format: str) -> str:
    """``name: value`` pairs; numbers in ``metrics_format``, anything it cannot format as its ``str()``."""
    parts = []
    for name, value in metrics.items():
        if not isinstance(value, str):
            try:
                value = format(value, metrics_format)
            except (TypeError, ValueError):
                value = str(value)
        parts.append(f"{name}: {value}")
    return delimiter.join(parts)


@functools.cache
def _rich_classes() -> dict[str, type]:
    """The classes that derive from rich's (:mod:`~fulmen.callbacks.progress.rich_columns`, which imports rich)."""
    require("rich", "rich", "The rich progress columns")
    from fulmen.callbacks.progress import rich_columns

    return {name: getattr(rich_columns, name) for name in _RICH_CLASSES}


@dataclass
class RichProgressBarTheme:
    """Styles (rich style strings or ``rich.style.Style``) of the parts of a ``RichProgressBar``, and how its
    metrics are written (``metrics_format`` for numbers, ``metrics_text_delimiter`` between them)."""

    description: Any = ""
    progress_bar: Any = "#6206E0"
    progress_bar_finished: Any = "#6206E0"
    progress_bar_pulse: Any = "#6206E0"
    batch_progress: Any = ""
    time: Any = "dim"
    processing_speed: Any = "dim underline"
    metrics: Any = "italic"
    metrics_text_delimiter: str = " "
    metrics_format: str = ".3f"


class RichProgressBar(RefreshingBar):
    """A rich progress display: a bar for the training epoch (one per epoch with ``leave=True``) with the
    ``prog_bar`` metrics on its row, and one per validation / test / predict dataloader.

    ``refresh_rate`` is how many times a second the display may redraw (0 turns it off).
    ``configure_columns`` gives the columns of a row; override it to show others.
    """

    _METRICS_INTERVAL = 0.1  # seconds between two reads of the metrics shown

    def __init__(
        self,
        refresh_rate: int = 100,
        leave: bool = False,
        theme: RichProgressBarTheme = RichProgressBarTheme(),
        console_kwargs: dict[str, Any] | None = None,
    ) -> None:
        require("rich", "rich", "RichProgressBar", available=_RICH_AVAILABLE)
        super().__init__(refresh_rate)
        self._leave = leave
        self.theme = theme if theme is not None else RichProgressBarTheme()
        self._console_kwargs = console_kwargs or {}
        self._console: Any = None
        self.progress: Any = None
        self._metric_component: Any = None
        self._progress_stopped = False
        self._last_draw = -math.inf
        self._last_metrics_read = -math.inf
        self._reset_progress_bar_ids()

    def _reset_progress_bar_ids(self) -> None:
        self.train_progress_bar_id: Any = None
        self.val_sanity_progress_bar_id: Any = None
        self.val_progress_bar_id: Any = None
        self.test_progress_bar_id: Any = None
        self.predict_progress_bar_id: Any = None

    # -- the tasks --------------------------------------------------------------------------------------
    def _task(self, task_id: Any) -> Any:
        if self.progress is None or task_id is None:
            raise AttributeError(f"{type(self).__name__}: that bar is not being shown now.")
        return next(task for task in self.progress.tasks if task.id == task_id)

    @property
    def train_progress_bar(self) -> Any:
        return self._task(self.train_progress_bar_id)

    @property
    def val_sanity_check_bar(self) -> Any:
        return self._task(self.val_sanity_progress_bar_id)

    @property
    def val_progress_bar(self) -> Any:
        return self._task(self.val_progress_bar_id)

    @property
    def test_progress_bar(self) -> Any:
        return self._task(self.test_progress_bar_id)

    # -- drawing ---------------------------------------------------------------------------------------
    def configure_columns(self, trainer: Trainer) -> list[Any]:
        """The columns of each bar's row, left to right (the metrics column follows them)."""
        from rich.progress import TextColumn

        classes = _rich_classes()
        theme = self.theme
        return [
            TextColumn("[progress.description]{task.description}"),
            classes["CustomBarColumn"](
                complete_style=theme.progress_bar,
                finished_style=theme.progress_bar_finished,
                pulse_style=theme.progress_bar_pulse,
            ),
            classes["BatchesProcessedColumn"](style=theme.batch_progress),
            classes["CustomTimeColumn"](style=theme.time),
            classes["ProcessingSpeedColumn"](style=theme.processing_speed),
        ]

    def _init_progress(self, trainer: Trainer) -> None:
        if self.is_disabled or (self.progress is not None and not self._progress_stopped):
            return
        from rich.console import Console

        classes = _rich_classes()
        self._reset_progress_bar_ids()
        if self._console is None:
            self._console = Console(**self._console_kwargs)
        theme = self.theme
        self._metric_component = classes["MetricsTextColumn"](
            trainer, theme.metrics, theme.metrics_text_delimiter, theme.metrics_format
        )
        self.progress = classes["CustomProgress"](
            *self.configure_columns(trainer), self._metric_component, console=self._console, auto_refresh=False
        )
        self.progress.start()
        self._progress_stopped = False

    def _stop_progress(self) -> None:
        if self.progress is not None and not self._progress_stopped:
            self.progress.stop()
            self._progress_stopped = True

    def refresh(self, hard: bool = False) -> None:
        """Redraw: at once when ``hard``, else unless the last redraw is less than ``1 / refresh_rate`` s old."""
        if self.progress is None or self._progress_stopped:
            return
        now = time.monotonic()
        if not hard and now - self._last_draw < 1.0 / max(self.refresh_rate, 1):
            return
        self._last_draw = now
        self.progress.refresh()

    def _add_task(self, total_batches: int | float, description: str, visible: bool = True) -> Any:
        if self.theme.description:
            description = f"[{self.theme.description}]{description}"
        return self.progress.add_task(description, total=total_batches, visible=visible)

    def _remove_task(self, task_id: Any) -> None:
        if self.progress is not None and task_id is not None:
            self.progress.remove_task(task_id)

    def _update(self, task_id: Any, current: int, hard: bool = False) -> None:
        if self.progress is None or self.is_disabled or task_id is None or self._progress_stopped:
            return
        self.progress.update(task_id, completed=current, visible=True)
        total = self._task(task_id).total
        self.refresh(hard=hard or (_is_finite(total) and current >= total))

    def _update_metrics(self, trainer: Trainer, pl_module: LightningModule, force: bool = False) -> None:
        if self.is_disabled or self._metric_component is None:
            return
        now = time.monotonic()
        if not force and now - self._last_metrics_read < self._METRICS_INTERVAL:
            return
        self._last_metrics_read = now
        self._metric_component.update(self.get_metrics(trainer, pl_module))

    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, Any]:
        from torch import Tensor

        from fulmen.utilities.apply_func import apply_to_collection

        return apply_to_collection(super().get_metrics(trainer, pl_module), Tensor, lambda t: t.item())

    def _get_train_description(self, current_epoch: int) -> str:
        description = f"Epoch {current_epoch}"
        if self.trainer.max_epochs is not None:
            description += f"/{self.trainer.max_epochs - 1}"
        # as wide as "Validation", so that the bars start in the same column
        return f"{description:{len(self.validation_description)}}"

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self.progress is not None and not self._progress_stopped:
            self.progress.console.print(*args, **kwargs)
        else:
            print(*args, **kwargs)

    # -- hooks -----------------------------------------------------------------------------------------
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._init_progress(trainer)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._init_progress(trainer)

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._init_progress(trainer)

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._init_progress(trainer)

    def on_sanity_check_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._init_progress(trainer)

    def on_sanity_check_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._remove_task(self.val_sanity_progress_bar_id)
        self.val_sanity_progress_bar_id = None
        self.refresh(hard=True)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.is_disabled:
            return
        if self.train_progress_bar_id is not None and self._leave:  # the finished epoch's bar stays printed
            self._stop_progress()
        self._init_progress(trainer)
        # a new task each epoch: the total may change between epochs, from finite to unknown too
        self._remove_task(self.train_progress_bar_id)
        self.train_progress_bar_id = self._add_task(self.total_train_batches,
                                                    self._get_train_description(trainer.current_epoch))  # fmt: skip
        self.refresh(hard=True)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.is_disabled:
            return
        if self.train_progress_bar_id is None:  # resumed in the middle of an epoch
            self.on_train_epoch_start(trainer, pl_module)
        self._update_metrics(trainer, pl_module)
        self._update(self.train_progress_bar_id, batch_idx + 1)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._update_metrics(trainer, pl_module, force=True)
        self.refresh(hard=True)

    def _eval_bar(self, task_id: Any, total: int | float, description: str) -> Any:
        """A new bar for the next dataloader of an evaluation run, replacing the previous loader's."""
        self._remove_task(task_id)
        new = self._add_task(total, description)
        self.refresh(hard=True)
        return new

    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.is_disabled or self.progress is None or not self.has_dataloader_changed(dataloader_idx):
            return
        total = self.total_val_batches_current_dataloader
        if trainer.sanity_checking:
            self.val_sanity_progress_bar_id = self._eval_bar(self.val_sanity_progress_bar_id, total,
                                                             self.sanity_check_description)  # fmt: skip
        else:
            self.val_progress_bar_id = self._eval_bar(self.val_progress_bar_id, total, self.validation_description)

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        task_id = self.val_sanity_progress_bar_id if trainer.sanity_checking else self.val_progress_bar_id
        self._update(task_id, batch_idx + 1)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        fn = trainer.state.fn
        if getattr(fn, "value", fn) == "fit" and not trainer.sanity_checking:  # validation inside fit never stays
            self._remove_task(self.val_progress_bar_id)
            self.val_progress_bar_id = None
            self.refresh(hard=True)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        fn = trainer.state.fn
        if getattr(fn, "value", fn) == "fit":
            self._update_metrics(trainer, pl_module, force=True)
        self.reset_dataloader_idx_tracker()

    def on_test_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.is_disabled or self.progress is None or not self.has_dataloader_changed(dataloader_idx):
            return
        self.test_progress_bar_id = self._eval_bar(self.test_progress_bar_id, self.total_test_batches_current_dataloader,
                                                   self.test_description)  # fmt: skip

    def on_test_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._update(self.test_progress_bar_id, batch_idx + 1)

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.reset_dataloader_idx_tracker()

    def on_predict_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.is_disabled or self.progress is None or not self.has_dataloader_changed(dataloader_idx):
            return
        self.predict_progress_bar_id = self._eval_bar(
            self.predict_progress_bar_id, self.total_predict_batches_current_dataloader, self.predict_description
        )

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._update(self.predict_progress_bar_id, batch_idx + 1)

    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.reset_dataloader_idx_tracker()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._stop_progress()  # the terminal must be usable for the traceback

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._stop_progress()

    def __getstate__(self) -> dict[str, Any]:
        # the console and the display hold locks and threads, which do not pickle
        return {**self.__dict__, "progress": None, "_console": None, "_metric_component": None}

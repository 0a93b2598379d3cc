"""``RichProgressBar`` and ``RichModelSummary``: the progress display and the layer table drawn with ``rich``
(``pip install 'fulmen[rich]'``; ``rich`` is imported when one of them is made).

The bar redraws at most ten times a second (and reads the metrics it shows only then: each read is a
host-device sync). Written to a file or a pipe (not a terminal), ``rich`` does not animate: the final state
of the display is printed once when it stops, never a line per batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fulmen.callbacks.progress.progress_bar import RefreshingBar
from fulmen.utilities.imports import require

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


@dataclass
class RichProgressBarTheme:
    """Styles (rich style strings or ``rich.style.Style``) of the parts of a ``RichProgressBar``."""

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
    """A rich progress display: a bar for the training epoch (one per epoch with ``leave=True``), one for
    each validation / test / predict run, and the ``prog_bar`` metrics on a line below."""

    _MIN_DRAW_INTERVAL = 0.1  # seconds between redraws (and metric reads)

    def __init__(
        self,
        refresh_rate: int = 1,
        leave: bool = False,
        theme: RichProgressBarTheme | None = None,
        console_kwargs: dict[str, Any] | None = None,
    ) -> None:
        require("rich", "rich", "RichProgressBar")
        super().__init__(refresh_rate)
        self._leave = leave
        self.theme = theme or RichProgressBarTheme()
        self._console_kwargs = console_kwargs or {}
        self.progress: Any = None
        self.train_progress_bar_id: Any = None
        self.val_progress_bar_id: Any = None
        self._metrics_text = ""
        self._last_draw = 0.0
        self._eval_n = 0
        self._eval_total: int | float | None = None

    def print(self, *args: Any, **kwargs: Any) -> None:
        if self.progress is not None:
            self.progress.console.print(*args, **kwargs)
        else:
            print(*args, **kwargs)

    # -- drawing ---------------------------------------------------------------------------------------
    def _start(self) -> None:
        if self.progress is not None or self.is_disabled:
            return
        from rich.console import Console, Group
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
        from rich.text import Text

        theme, bar = self.theme, self

        class _Progress(Progress):
            def get_renderables(self) -> Any:  # the bars, then the metrics line
                yield Group(self.make_tasks_table(self.tasks), Text(bar._metrics_text, style=theme.metrics))

        self.progress = _Progress(
            TextColumn("[progress.description]{task.description}", style=theme.description),
            BarColumn(style="bar.back", complete_style=theme.progress_bar, finished_style=theme.progress_bar_finished,
                      pulse_style=theme.progress_bar_pulse),
            TextColumn("{task.completed}/{task.fields[total_text]}", style=theme.batch_progress),
            TimeElapsedColumn(),
            TextColumn("•", style=theme.time),
            TimeRemainingColumn(),
            TextColumn("{task.fields[speed]}", style=theme.processing_speed),
            console=Console(**self._console_kwargs),
            auto_refresh=False,
        )
        self.progress.start()

    def _stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
            self.train_progress_bar_id = self.val_progress_bar_id = None

    def _add_task(self, description: str, total: int | float | None, visible: bool = True) -> Any:
        finite = total if total not in (None, float("inf")) else None
        return self.progress.add_task(description, total=finite, visible=visible, speed="",
                                      total_text="?" if finite is None else str(int(finite)))  # fmt: skip

    def _advance(self, task: Any, n: int, total: int | float | None, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.progress is None or task is None:
            return
        last = total not in (None, float("inf")) and n >= int(total)  # type: ignore[arg-type]
        if not last and n % self._refresh_rate:
            return
        now = time.monotonic()
        if not last and now - self._last_draw < self._MIN_DRAW_INTERVAL:
            return
        self._last_draw = now
        elapsed = self.progress.tasks[self._index(task)].elapsed or 0.0
        speed = f"{n / elapsed:.2f}it/s" if elapsed > 0 else ""
        self.progress.update(task, completed=n, speed=speed)
        if task == self.train_progress_bar_id or trainer.state.fn is None or trainer.state.fn.value != "fit":
            self._metrics_text = self._format_metrics(trainer, pl_module)
        self.progress.refresh()

    def _index(self, task: Any) -> int:
        return next(i for i, t in enumerate(self.progress.tasks) if t.id == task)

    def _format_metrics(self, trainer: Trainer, pl_module: LightningModule) -> str:
        parts = []
        for key, value in self.get_metrics(trainer, pl_module).items():
            if isinstance(value, float):
                value = format(value, self.theme.metrics_format)
            parts.append(f"{key}: {value}")
        return self.theme.metrics_text_delimiter.join(parts)

    # -- hooks -----------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if not trainer.is_global_zero:
            self.disable()

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start()

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start()
        if self.progress is None:
            return
        description = f"Epoch {trainer.current_epoch}"
        if self.train_progress_bar_id is not None and not self._leave:
            self.progress.reset(self.train_progress_bar_id, total=None, description=description)
            total = trainer.num_training_batches
            finite = total if total != float("inf") else None
            self.progress.update(self.train_progress_bar_id, total=finite,
                                 total_text="?" if finite is None else str(int(finite)))  # fmt: skip
        else:
            self.train_progress_bar_id = self._add_task(description, trainer.num_training_batches)
        self.progress.refresh()

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._advance(self.train_progress_bar_id, batch_idx + 1, trainer.num_training_batches, trainer, pl_module)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.progress is not None:
            self._metrics_text = self._format_metrics(trainer, pl_module)
            self.progress.refresh()

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._stop()

    def _eval_start(self, trainer: Trainer, description: str, totals: list[int | float]) -> None:
        self._eval_n = 0
        self._eval_total = sum(totals) if totals else None
        self._start()
        if self.progress is None:
            return
        self.val_progress_bar_id = self._add_task(description, self._eval_total)
        self.progress.refresh()

    def _eval_batch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_n += 1
        self._advance(self.val_progress_bar_id, self._eval_n, self._eval_total, trainer, pl_module)

    def _eval_end(self, trainer: Trainer) -> None:
        if self.progress is None or self.val_progress_bar_id is None:
            return
        fitting = trainer.state.fn is not None and trainer.state.fn.value == "fit"
        if fitting or not self._leave:
            self.progress.remove_task(self.val_progress_bar_id)  # validation inside fit never stays
        self.val_progress_bar_id = None
        self.progress.refresh()
        if not fitting:
            self._stop()

    def on_sanity_check_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_start(trainer, "Sanity Checking", trainer.num_sanity_val_batches)

    def on_sanity_check_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.progress is not None and self.val_progress_bar_id is not None:
            self.progress.remove_task(self.val_progress_bar_id)
            self.val_progress_bar_id = None

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self._eval_start(trainer, "Validation", trainer.num_val_batches)

    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        self._eval_batch_end(trainer, pl_module)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self._eval_end(trainer)
            if self.progress is not None:
                self._metrics_text = self._format_metrics(trainer, pl_module)

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_start(trainer, "Testing", trainer.num_test_batches)

    def on_test_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        self._eval_batch_end(trainer, pl_module)

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_end(trainer)

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_start(trainer, "Predicting", trainer.num_predict_batches)

    def on_predict_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        self._eval_batch_end(trainer, pl_module)

    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_end(trainer)

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._stop()  # the terminal must be usable for the traceback

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._stop()

"""Progress bars. The tqdm bar reads metric values only when it redraws (at most ~10 times a second)."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from fulmen.callbacks.callback import Callback

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


class ProgressBar(Callback):
    """Base class: ``get_metrics`` gives what a bar shows (``v_num`` plus ``prog_bar`` metrics)."""

    def __init__(self) -> None:
        self._trainer: Trainer | None = None

    def disable(self) -> None: ...
    def enable(self) -> None: ...

    def print(self, *args: Any, **kwargs: Any) -> None:
        print(*args, **kwargs)

    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, int | str | float | dict[str, float]]:
        items: dict[str, Any] = {}
        logger = trainer.logger
        if logger is not None and logger.version is not None:
            version = logger.version
            items["v_num"] = version[-4:] if isinstance(version, str) else version
        items.update(trainer.progress_bar_metrics)
        return items


class RefreshingBar(ProgressBar):
    """A bar drawn every ``refresh_rate`` batches (0 turns it off), switched off on ranks other than zero."""

    def __init__(self, refresh_rate: int = 1) -> None:
        super().__init__()
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 0:
            raise ValueError(
                f"{type(self).__name__}(refresh_rate={refresh_rate!r}) must be an int >= 0 (0 disables the bar)."
            )
        self._refresh_rate = refresh_rate
        self._enabled = True

    @property
    def refresh_rate(self) -> int:
        return self._refresh_rate

    @property
    def is_enabled(self) -> bool:
        return self._enabled and self._refresh_rate > 0

    @property
    def is_disabled(self) -> bool:
        return not self.is_enabled

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


class TQDMProgressBar(RefreshingBar):
    """A tqdm bar per training epoch, plus one for validation / test / predict runs."""

    _MIN_METRICS_INTERVAL = 0.1  # seconds between metric reads: each read is a host-device sync
    _MIN_DRAW_INTERVAL = 0.1  # seconds between redraws

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        super().__init__(refresh_rate)
        self._process_position = process_position
        self._leave = leave
        self.train_progress_bar: Any = None
        self.val_progress_bar: Any = None
        self._last_metrics_time = 0.0
        self._last_draw_time = 0.0
        self._plain = False  # stdout is not a terminal (decided in setup)

    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        bar = self.val_progress_bar or self.train_progress_bar
        if bar is not None and not getattr(bar, "disable", True):
            from tqdm import tqdm

            tqdm.write(sep.join(map(str, args)), **{k: v for k, v in kwargs.items() if k in ("file", "end")})
        else:
            print(*args, sep=sep, **kwargs)

    def _bar(self, desc: str, total: int | float | None, leave: bool, position: int = 0) -> Any:
        from tqdm import tqdm

        if self._plain:
            return _PlainBar(desc, None if total in (None, float("inf")) else int(total), leave, self.is_disabled)
        return tqdm(
            desc=desc,
            total=None if total in (None, float("inf")) else int(total),
            leave=leave,
            position=self._process_position + position,
            dynamic_ncols=True,
            file=sys.stdout,
            smoothing=0,
            disable=self.is_disabled,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}]{postfix}",
        )

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if not trainer.is_global_zero:
            self.disable()
        # a log file or a pipe: one finished line per epoch / run instead of redraws and cursor moves
        self._plain = not _is_terminal(sys.stdout)

    def _set_postfix(self, bar: Any, trainer: Trainer, pl_module: LightningModule, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_metrics_time < self._MIN_METRICS_INTERVAL:
            return
        self._last_metrics_time = now
        metrics = self.get_metrics(trainer, pl_module)
        bar.set_postfix_str(", ".join(f"{k}={_fmt(v)}" for k, v in metrics.items()), refresh=False)

    def _update(self, bar: Any, n: int, total: int | float | None) -> bool:
        if bar is None or self.is_disabled:
            return False
        last = total is not None and n == total  # the last batch: always drawn
        if not last and n % self._refresh_rate:
            return False
        # at most _MIN_DRAW_INTERVAL between redraws: drawing every batch would cost more than the
        # framework's whole step on a fast loop (tqdm.update() would also limit, but costs more to ask)
        now = time.monotonic()
        if not last and now - self._last_draw_time < self._MIN_DRAW_INTERVAL:
            return False
        self._last_draw_time = now
        bar.n = n
        bar.refresh()
        return True

    # -- training -----------------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.train_progress_bar is not None:
            self.train_progress_bar.close()
        self.train_progress_bar = self._bar(
            f"Epoch {trainer.current_epoch}", trainer.num_training_batches, leave=True
        )

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        bar = self.train_progress_bar
        n = batch_idx + 1
        if self._update(bar, n, trainer.num_training_batches):
            self._set_postfix(bar, trainer, pl_module)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        bar = self.train_progress_bar
        if bar is not None and not self.is_disabled:
            self._set_postfix(bar, trainer, pl_module, force=True)
            bar.refresh()

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.train_progress_bar is not None:
            self.train_progress_bar.close()
            self.train_progress_bar = None

    # -- evaluation -----------------------------------------------------------------------------------
    def _eval_start(self, trainer: Trainer, desc: str, totals: list[int | float]) -> None:
        total = sum(totals) if totals else None
        fitting = trainer.state.fn is not None and trainer.state.fn.value == "fit"
        # as plain lines, a run outside fit (validate / test / predict) always leaves its line
        leave = (self._leave or self._plain) and not fitting
        self.val_progress_bar = self._bar(desc, total, leave=leave, position=int(fitting))
        self._eval_n = 0

    def _eval_batch_end(self) -> None:
        self._eval_n += 1
        self._update(
            self.val_progress_bar,
            self._eval_n,
            self.val_progress_bar.total if self.val_progress_bar else None,
        )

    def _eval_end(self) -> None:
        if self.val_progress_bar is not None:
            self.val_progress_bar.close()
            self.val_progress_bar = None

    def on_sanity_check_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_end()

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking:
            self._eval_start(trainer, "Sanity Checking", trainer.num_sanity_val_batches)
        else:
            self._eval_start(trainer, "Validation", trainer.num_val_batches)

    def on_validation_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        self._eval_batch_end()

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self._eval_end()
            bar = self.train_progress_bar
            if bar is not None and not self.is_disabled:
                self._set_postfix(bar, trainer, pl_module, force=True)

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_start(trainer, "Testing", trainer.num_test_batches)

    def on_test_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        self._eval_batch_end()

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_end()

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_start(trainer, "Predicting", trainer.num_predict_batches)

    def on_predict_batch_end(self, trainer: Trainer, pl_module: LightningModule, *args: Any, **kwargs: Any) -> None:
        self._eval_batch_end()

    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_end()

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        for bar in (self.train_progress_bar, self.val_progress_bar):
            if bar is not None:
                bar.close()
        self.train_progress_bar = self.val_progress_bar = None


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _PlainBar:
    """What the bar is when output goes to a file: it counts silently and, if ``leave``, prints its final
    state as one line when closed (tqdm's own format, without carriage returns or cursor moves)."""

    def __init__(self, desc: str, total: int | None, leave: bool, disable: bool) -> None:
        self.desc, self.total, self.leave, self.disable = desc, total, leave, disable
        self.n = 0
        self._postfix = ""
        self._start = time.monotonic()
        self._closed = False

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self._postfix = text

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.leave and not self.disable:
            from tqdm import tqdm

            line = tqdm.format_meter(self.n, self.total, time.monotonic() - self._start, prefix=self.desc,
                                     postfix=self._postfix or None, ncols=0)  # fmt: skip
            print(line, file=sys.stdout, flush=True)

"""``TQDMProgressBar``: the default progress bar, drawn with tqdm.

One bar per stage, each a :class:`Tqdm` made by an ``init_*_tqdm`` method (override one to restyle that bar):
``train_progress_bar`` (one line per epoch, kept), ``val_progress_bar`` (the sanity check and validation,
restarted for each dataloader), ``test_progress_bar`` and ``predict_progress_bar``.

Cost in the hot loop: every ``refresh_rate`` batches the counter is set (an attribute), but the bar is
redrawn, and the metrics it shows read (each read is a host-device sync), at most ten times a second; the
last batch of a stage is always drawn. Written to a file or a pipe (not a terminal), a bar prints its final
state as one line when it is kept (each training epoch, each test / predict run) and nothing in between.
"""

from __future__ import annotations

import math
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from tqdm import tqdm as _tqdm

from fulmen.callbacks.progress.progress_bar import ProgressBar as ProgressBar
from fulmen.callbacks.progress.progress_bar import RefreshingBar
from fulmen.utilities.rank_zero import rank_zero_debug as rank_zero_debug

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

_NUMBER_WIDTH = 5  # short numbers in the postfix are padded with zeros to this many characters


class Tqdm(_tqdm):
    """tqdm whose postfix numbers keep a steady width: floats padded with zeros to five characters
    (``loss=0.120``, ``1.000``, ``12.30``), so the bar does not jitter as the values change."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

    @staticmethod
    def format_num(n: int | float | str) -> str:
        """Numbers as tqdm shortens them (three significant digits or scientific notation, whichever is
        shorter), then floats and text padded to five characters: ``1.0`` -> ``'1.000'``, ``12.3456`` ->
        ``'12.30'``, ``'0.1'`` -> ``'0.100'``; scientific notation (``1e-5``), ints and words stay as they are."""
        text = n if isinstance(n, str) else str(_tqdm.format_num(n))
        if not isinstance(n, float | str) or "e" in text:
            return text
        if "." not in text:
            if len(text) >= _NUMBER_WIDTH:
                return text
            if not _is_number(text):
                return text  # a word: nothing to pad
            text += "."
        return text.ljust(_NUMBER_WIDTH, "0")


def convert_inf(x: int | float | None) -> int | float | None:
    """A count for tqdm's ``total``: ``None`` (unknown) for an infinite or NaN one, else unchanged."""
    if x is None or math.isinf(x) or math.isnan(x):
        return None
    return x


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class TQDMProgressBar(RefreshingBar):
    """The default bar (``Trainer(enable_progress_bar=True)``).

    Args:
        refresh_rate: draw every that many batches; 0 turns the bar off. The ``TQDM_MINITERS`` environment
            variable raises it (the larger of the two is used); on Google Colab (``COLAB_GPU`` set) the default
            1 becomes 20.
        process_position: the line the bars start at, for several trainers in one terminal.
        leave: keep each epoch's training bar on screen (a new line per epoch) instead of redrawing one line.
    """

    BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]"
    _MIN_DRAW_INTERVAL = 0.1  # seconds between redraws (and metric reads) inside a stage

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False) -> None:
        super().__init__(refresh_rate)
        env = os.environ.get("TQDM_MINITERS")
        if os.environ.get("COLAB_GPU") and refresh_rate == 1:
            # a Colab notebook's output cell falls behind (and has crashed) on a redraw per batch: the default
            # there draws every 20 batches; a rate the user chose stands
            self._refresh_rate = 20
        elif env is not None and env.strip().isdigit():
            self._refresh_rate = max(self._refresh_rate, int(env))
        self._process_position = process_position
        self._leave = leave
        self._train_progress_bar: Tqdm | None = None
        self._val_progress_bar: Tqdm | None = None
        self._test_progress_bar: Tqdm | None = None
        self._predict_progress_bar: Tqdm | None = None
        self._last_draw = 0.0
        self._to_terminal = True  # where the last bar made was drawn
        self._epoch_line_written = False  # a log file already holds this epoch's line

    def __getstate__(self) -> dict[str, Any]:
        # the bars hold a stream and a lock: a pickled callback (ddp_spawn, deepcopy) starts without them
        state = self.__dict__.copy()
        for name in ("_train_progress_bar", "_val_progress_bar", "_test_progress_bar", "_predict_progress_bar"):
            state[name] = None
        state["_trainer"] = None
        return state

    @property
    def process_position(self) -> int:
        return self._process_position

    # -- the bars ---------------------------------------------------------------------------------------
    def _get_bar(self, name: str) -> Tqdm:
        bar = getattr(self, f"_{name}")
        if bar is None:
            raise TypeError(f"The `{type(self).__name__}.{name}` reference has not been set yet.")
        return bar

    @property
    def train_progress_bar(self) -> Tqdm:
        return self._get_bar("train_progress_bar")

    @train_progress_bar.setter
    def train_progress_bar(self, bar: Tqdm | None) -> None:
        self._train_progress_bar = bar

    @property
    def val_progress_bar(self) -> Tqdm:
        return self._get_bar("val_progress_bar")

    @val_progress_bar.setter
    def val_progress_bar(self, bar: Tqdm | None) -> None:
        self._val_progress_bar = bar

    @property
    def test_progress_bar(self) -> Tqdm:
        return self._get_bar("test_progress_bar")

    @test_progress_bar.setter
    def test_progress_bar(self, bar: Tqdm | None) -> None:
        self._test_progress_bar = bar

    @property
    def predict_progress_bar(self) -> Tqdm:
        return self._get_bar("predict_progress_bar")

    @predict_progress_bar.setter
    def predict_progress_bar(self, bar: Tqdm | None) -> None:
        self._predict_progress_bar = bar

    def _make(self, desc: str, position: int, leave: bool) -> Tqdm:
        """A bar on stdout, or, when stdout is not a terminal, on a stream that keeps only finished lines (and
        on line 0: lines below others are a terminal's feature)."""
        terminal = self._to_terminal = _is_terminal(sys.stdout)
        if terminal:
            return Tqdm(desc=desc, position=position, disable=self.is_disabled, leave=leave, dynamic_ncols=True,
                        file=sys.stdout, smoothing=0, mininterval=0, bar_format=self.BAR_FORMAT)  # fmt: skip
        return Tqdm(desc=desc, position=0, disable=self.is_disabled, leave=leave, ncols=0,
                    file=_FinishedLines(sys.stdout), smoothing=0, mininterval=0, bar_format=self.BAR_FORMAT)  # fmt: skip

    def init_sanity_tqdm(self) -> Tqdm:
        """The bar of the sanity check (removed when it ends)."""
        return self._make(self.sanity_check_description, position=2 * self._process_position, leave=False)

    def init_train_tqdm(self) -> Tqdm:
        """The training bar: one line, its description ``Epoch N``."""
        return self._make(self.train_description, position=2 * self._process_position, leave=True)

    def init_validation_tqdm(self) -> Tqdm:
        """The validation bar, below the training bar while fitting; removed when validation ends."""
        fitting = self.trainer.state.fn is not None and self.trainer.state.fn.value == "fit"
        has_main_bar = fitting and self._train_progress_bar is not None
        return self._make(self.validation_description, position=2 * self._process_position + has_main_bar,
                          leave=not has_main_bar)  # fmt: skip

    def init_test_tqdm(self) -> Tqdm:
        return self._make(self.test_description, position=2 * self._process_position, leave=True)

    def init_predict_tqdm(self) -> Tqdm:
        return self._make(self.predict_description, position=2 * self._process_position, leave=True)

    # -- drawing ----------------------------------------------------------------------------------------
    def _update_n(self, bar: Tqdm, n: int, total: int | float, force: bool = False) -> bool:
        """Set the counter; redraw when a tenth of a second has passed (or at the end). True if drawn."""
        if bar.disable:
            return False
        bar.n = n
        now = time.monotonic()
        if not force and n != total and now - self._last_draw < self._MIN_DRAW_INTERVAL:
            return False
        self._last_draw = now
        bar.refresh()
        return True

    def _show_metrics(self, bar: Tqdm, trainer: Trainer, pl_module: LightningModule) -> None:
        if not bar.disable:
            bar.set_postfix(self.get_metrics(trainer, pl_module))

    def _advance(self, bar: Tqdm, n: int, total: int | float) -> None:
        if self._should_update(n, total):
            self._update_n(bar, n, total)

    def _restart(self, bar: Tqdm, total: int | float, desc: str) -> None:
        bar.reset(_total(total))
        bar.initial = 0
        bar.set_description(desc)

    # -- sanity check and training ----------------------------------------------------------------------
    def on_sanity_check_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.val_progress_bar = self.init_sanity_tqdm()
        self.train_progress_bar = Tqdm(disable=True)  # a placeholder: the validation bar goes below it

    def on_sanity_check_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._train_progress_bar is not None:
            self._train_progress_bar.close()
        if self._val_progress_bar is not None:
            self._val_progress_bar.close()
        # the closed bars stay readable (their totals and counts) until the next stage replaces them
        self.reset_dataloader_idx_tracker()

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.train_progress_bar = self.init_train_tqdm()

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._leave:  # keep the finished epoch's line: a new bar below it
            self._close_train_bar()
            self.train_progress_bar = self.init_train_tqdm()
        self._restart(self.train_progress_bar, self.total_train_batches, f"Epoch {trainer.current_epoch}")
        self._epoch_line_written = False

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        n, total = batch_idx + 1, self.total_train_batches
        # the metrics of the epoch's last batch are read once, at the epoch's end (one sync, not two)
        if self._should_update(n, total) and self._update_n(self.train_progress_bar, n, total) and n != total:
            self._show_metrics(self.train_progress_bar, trainer, pl_module)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        bar = self.train_progress_bar
        if not bar.disable:
            self._show_metrics(bar, trainer, pl_module)
            bar.refresh()
            if not self._to_terminal:
                bar.fp.write("\n")  # a log file gets the finished epoch as one line
                self._epoch_line_written = True

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._close_train_bar()

    def _close_train_bar(self) -> None:
        bar = self._train_progress_bar
        if bar is None:
            return
        if self._to_terminal:
            bar.close()
            return
        leave, bar.leave = bar.leave, False  # in a log file its epoch's line is written already: not twice
        bar.close()
        bar.leave = leave

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        """Close the bars now, their last state written, so that what the program prints after a failed run
        (its own messages, the traceback) comes after the bar rather than before it (an open bar is otherwise
        finished only when the interpreter exits)."""
        train = self._train_progress_bar
        if train is not None and not train.disable and not self._to_terminal and not self._epoch_line_written:
            train.refresh()
            train.fp.write("\n")  # in a log file: the epoch's line as far as it went
            self._epoch_line_written = True
        for bar in (self._val_progress_bar, self._test_progress_bar, self._predict_progress_bar):
            if bar is not None:
                bar.close()
        self._close_train_bar()
        sys.stdout.flush()

    # -- validation, test, predict ---------------------------------------------------------------------
    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not trainer.sanity_checking:
            self.val_progress_bar = self.init_validation_tqdm()

    def on_validation_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            description = self.sanity_check_description if trainer.sanity_checking else self.validation_description
            self._restart(self.val_progress_bar, self.total_val_batches_current_dataloader,
                          f"{description} DataLoader {dataloader_idx}")  # fmt: skip

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._advance(self.val_progress_bar, batch_idx + 1, self.total_val_batches_current_dataloader)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._train_progress_bar is not None and trainer.state.fn is not None and trainer.state.fn.value == "fit":
            self._show_metrics(self._train_progress_bar, trainer, pl_module)
        if self._val_progress_bar is not None:
            self._val_progress_bar.close()
        self.reset_dataloader_idx_tracker()

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.test_progress_bar = self.init_test_tqdm()

    def on_test_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            self._restart(self.test_progress_bar, self.total_test_batches_current_dataloader,
                          f"{self.test_description} DataLoader {dataloader_idx}")  # fmt: skip

    def on_test_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._advance(self.test_progress_bar, batch_idx + 1, self.total_test_batches_current_dataloader)

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._test_progress_bar is not None:
            self._test_progress_bar.close()
        self.reset_dataloader_idx_tracker()

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self.predict_progress_bar = self.init_predict_tqdm()

    def on_predict_batch_start(
        self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self.has_dataloader_changed(dataloader_idx):
            self._restart(self.predict_progress_bar, self.total_predict_batches_current_dataloader,
                          f"{self.predict_description} DataLoader {dataloader_idx}")  # fmt: skip

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._advance(self.predict_progress_bar, batch_idx + 1, self.total_predict_batches_current_dataloader)

    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._predict_progress_bar is not None:
            self._predict_progress_bar.close()
        self.reset_dataloader_idx_tracker()

    def print(self, *args: Any, **kwargs: Any) -> None:
        """Printed above the active bar (``tqdm.write``) so the bar is not cut; plain ``print`` without one."""
        bars = (self._train_progress_bar, self._val_progress_bar, self._test_progress_bar, self._predict_progress_bar)
        active = next((b for b in bars if b is not None and not b.disable), None)
        if active is not None and self.is_enabled:
            sep = kwargs.pop("sep", " ")
            active.write(sep.join(map(str, args)), **kwargs)
        else:
            print(*args, **kwargs)


def _total(total: int | float) -> int | None:
    """tqdm's total: ``None`` (unknown length) for an infinite count."""
    count = convert_inf(total)
    return None if count is None else int(count)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class _FinishedLines:
    """A stream for tqdm when the output is a file or a pipe: redraws (``\\r`` + the bar) are dropped and a
    finished line (tqdm ends a kept bar with ``\\n``) is written once, without cursor moves."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self._current = ""

    def write(self, text: str) -> None:
        for piece in re.split(r"(\n)", _ANSI.sub("", text)):
            if piece == "\n":
                if self._current.strip():
                    self._target.write(self._current.strip() + "\n")
                    self._target.flush()
                self._current = ""
            elif piece:
                self._current = piece.rsplit("\r", 1)[-1] if "\r" in piece else self._current + piece

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


__all__ = ["TQDMProgressBar", "Tqdm", "convert_inf"]

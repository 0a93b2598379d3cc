"""Progress bars as they look where they are printed: redrawn in a terminal, one finished line per epoch in a
log file (no carriage returns, no cursor moves), for tqdm (the default) and rich."""

from __future__ import annotations

import io
import time

import pytest

from fulmen import Trainer
from fulmen.demos.boring_classes import BoringModel

rich = pytest.importorskip("rich", reason="the test extras install rich")

from fulmen.callbacks import RichModelSummary, RichProgressBar, RichProgressBarTheme  # noqa: E402


class Logged(BoringModel):
    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("train_loss", out["loss"], prog_bar=True)
        return out


def _fit(callbacks, **kwargs):
    trainer = Trainer(max_epochs=2, limit_train_batches=30, limit_val_batches=3, callbacks=callbacks, logger=False,
                      enable_model_summary=False, enable_checkpointing=False, **kwargs)  # fmt: skip
    trainer.fit(Logged())
    return trainer


def test_tqdm_to_a_file_prints_one_line_per_epoch(capsys):
    _fit([])
    out = capsys.readouterr().out
    assert "\r" not in out and "\x1b[" not in out
    lines = [line for line in out.splitlines() if line.startswith("Epoch")]
    assert len(lines) == 2 and lines[1].startswith("Epoch 1: 100% 30/30") and "train_loss=" in lines[1]


def test_rich_to_a_file_prints_the_final_state_once():
    buffer = io.StringIO()
    _fit([RichProgressBar(console_kwargs={"file": buffer, "force_terminal": False, "width": 100})])
    out = buffer.getvalue()
    assert "\r" not in out and "\x1b[" not in out
    assert out.count("Epoch 1") == 1 and "30/30" in out and "train_loss: " in out
    assert len(out.splitlines()) <= 3  # the bar and the metrics line, not a line per batch


def test_rich_in_a_terminal_redraws_at_most_ten_times_a_second():
    buffer = io.StringIO()
    bar = RichProgressBar(leave=True, theme=RichProgressBarTheme(metrics_format=".1e"),
                          console_kwargs={"file": buffer, "force_terminal": True, "width": 100})  # fmt: skip
    draws = []
    start = time.monotonic()

    class Slow(Logged):
        def training_step(self, batch, batch_idx):
            time.sleep(0.002)
            if bar.progress is not None and not getattr(bar.progress, "counted", False):
                bar.progress.counted = True
                real = bar.progress.refresh

                def counted():
                    draws.append(1)
                    real()

                bar.progress.refresh = counted
            return super().training_step(batch, batch_idx)

    trainer = Trainer(max_epochs=2, limit_train_batches=100, limit_val_batches=3, callbacks=[bar], logger=False,
                      enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    trainer.fit(Slow())
    elapsed = time.monotonic() - start
    # 200 training batches: at most 10 redraws a second, plus the forced ones at epoch and run boundaries
    assert len(draws) <= 10 * elapsed + 20 < 200
    out = buffer.getvalue()
    assert "Epoch 0" in out and "Epoch 1" in out  # leave=True: one bar per epoch
    assert "train_loss: " in out and "e+" in out.split("train_loss: ")[-1][:12]  # the theme's format


def test_rich_disabled_and_missing_package(monkeypatch):
    buffer = io.StringIO()
    _fit([RichProgressBar(refresh_rate=0, console_kwargs={"file": buffer})])
    assert buffer.getvalue() == ""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "rich" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=r"fulmen\[rich\]"):
        RichProgressBar()


def test_rich_model_summary(capsys):
    trainer = Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, callbacks=[RichModelSummary()],
                      logger=False, enable_progress_bar=False, enable_checkpointing=False)  # fmt: skip
    trainer.fit(BoringModel())
    out = capsys.readouterr().out
    assert "Name" in out and "layer" in out and "Linear" in out and "Total params: 66" in out

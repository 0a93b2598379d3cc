"""Progress bars as they look where they are printed: redrawn in a terminal, one finished line per epoch in a
log file (no carriage returns, no cursor moves), for tqdm (the default) and rich."""

from __future__ import annotations

import io
import time

import pytest

from fulmen import Trainer
from fulmen.demos.boring_classes import BoringModel
from tests.parity import oracle

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


@pytest.mark.parametrize("refresh_rate", [10, 100])
def test_rich_in_a_terminal_redraws_at_most_refresh_rate_times_a_second(refresh_rate):
    """``refresh_rate`` is redraws per second (Lightning's meaning); the metrics are read at most ten times a
    second whatever it is (each read may wait for the device)."""
    buffer = io.StringIO()
    bar = RichProgressBar(refresh_rate=refresh_rate, leave=True, theme=RichProgressBarTheme(metrics_format=".1e"),
                          console_kwargs={"file": buffer, "force_terminal": True, "width": 120})  # fmt: skip
    draws, reads = [], []
    real_get_metrics = bar.get_metrics

    def counted_get_metrics(*args):
        reads.append(1)
        return real_get_metrics(*args)

    bar.get_metrics = counted_get_metrics

    class Slow(Logged):
        def training_step(self, batch, batch_idx):
            time.sleep(0.002)
            if bar.progress is not None and not getattr(bar.progress, "counted", False):
                bar.progress.counted = True  # each epoch has its own display (leave=True)
                real = bar.progress.refresh

                def counted():
                    draws.append(1)
                    real()

                bar.progress.refresh = counted
            return super().training_step(batch, batch_idx)

    trainer = Trainer(max_epochs=2, limit_train_batches=100, limit_val_batches=3, callbacks=[bar], logger=False,
                      enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    start = time.monotonic()
    trainer.fit(Slow())
    elapsed = time.monotonic() - start
    # 200 training batches: at most refresh_rate redraws a second, plus the forced ones at epoch and run boundaries
    assert 2 < len(draws) <= refresh_rate * elapsed + 20
    if refresh_rate == 10:
        assert len(draws) < 200
    assert len(reads) <= 10 * elapsed + 10 < 200
    out = buffer.getvalue()
    assert "Epoch 0/1" in out and "Epoch 1/1" in out  # leave=True: one bar per epoch
    assert "train_loss: " in out and "e+" in out.split("train_loss: ")[-1][:12]  # the theme's format


def test_rich_disabled_and_missing_package(monkeypatch):
    buffer = io.StringIO()
    _fit([RichProgressBar(refresh_rate=0, console_kwargs={"file": buffer})])
    assert buffer.getvalue() == ""
    # the module's availability flag decides (what Lightning's suites patch to simulate a missing package)
    monkeypatch.setattr("fulmen.callbacks.progress.rich_progress._RICH_AVAILABLE", False)
    with pytest.raises(ModuleNotFoundError, match=r"fulmen\[rich\]"):
        RichProgressBar()


def test_rich_model_summary(capsys):
    trainer = Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, callbacks=[RichModelSummary()],
                      logger=False, enable_progress_bar=False, enable_checkpointing=False)  # fmt: skip
    trainer.fit(BoringModel())
    out = capsys.readouterr().out
    assert "Name" in out and "layer" in out and "Linear" in out and "Total params: 66" in out


class _RecordingTqdm:
    """Wraps the bars TQDMProgressBar makes: the counter values, totals and descriptions each one had."""

    made: list = []

    @classmethod
    def install(cls, monkeypatch):
        from fulmen.callbacks.progress import tqdm_progress

        cls.made = []
        original = tqdm_progress.Tqdm

        class Recording(original):
            def __init__(self, *args, **kwargs):
                self.n_values, self.totals, self.descriptions = [], [], []
                super().__init__(*args, **kwargs)
                cls.made.append(self)

            def reset(self, total=None):
                super().reset(total)
                self.totals.append(total)
                if not self.n_values or self.n_values[-1] != self.n:
                    self.n_values.append(self.n)

            def refresh(self, *args, **kwargs):
                if not self.n_values or self.n_values[-1] != self.n:
                    self.n_values.append(self.n)
                return super().refresh(*args, **kwargs)

            def set_description(self, desc=None, refresh=True):
                super().set_description(desc, refresh)
                self.descriptions.append(desc)

        monkeypatch.setattr(tqdm_progress, "Tqdm", Recording)
        monkeypatch.setattr(tqdm_progress.TQDMProgressBar, "_MIN_DRAW_INTERVAL", 0.0)  # draw at every update


@pytest.mark.parametrize(("batches", "refresh_rate", "expected"), [(5, 3, [0, 3, 5]), (2, 1, [0, 1, 2]), (5, 6, [0, 5])])
def test_tqdm_updates_every_refresh_rate_batches_and_at_the_last(monkeypatch, batches, refresh_rate, expected):
    from fulmen.callbacks import TQDMProgressBar

    _RecordingTqdm.install(monkeypatch)
    bar = TQDMProgressBar(refresh_rate=refresh_rate)
    trainer = Trainer(max_epochs=1, limit_train_batches=batches, limit_val_batches=2, callbacks=[bar], logger=False,
                      enable_checkpointing=False, enable_model_summary=False, num_sanity_val_steps=0)  # fmt: skip
    trainer.fit(BoringModel())
    assert bar.train_progress_bar.n_values == expected and bar.train_progress_bar.leave
    assert bar.train_progress_bar.descriptions == ["Epoch 0"]
    assert bar.val_progress_bar.n_values == [0, 2] if refresh_rate > 1 else [0, 1, 2]


def test_tqdm_has_a_bar_per_stage_restarted_per_dataloader(monkeypatch):
    from torch.utils.data import DataLoader

    from fulmen.callbacks import TQDMProgressBar
    from fulmen.demos.boring_classes import RandomDataset

    class TwoLoaders(BoringModel):
        def val_dataloader(self):
            return [DataLoader(RandomDataset(32, 6)), DataLoader(RandomDataset(32, 4))]

        test_dataloader = predict_dataloader = val_dataloader

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            return None

        test_step = predict_step = validation_step

    _RecordingTqdm.install(monkeypatch)
    bar = TQDMProgressBar()
    trainer = Trainer(max_epochs=1, limit_train_batches=2, num_sanity_val_steps=3, callbacks=[bar], logger=False,
                      enable_checkpointing=False, enable_model_summary=False)  # fmt: skip
    model = TwoLoaders()
    trainer.fit(model)
    sanity = _RecordingTqdm.made[0]
    assert sanity.descriptions == ["Sanity Checking DataLoader 0", "Sanity Checking DataLoader 1"]
    assert sanity.totals == [3, 3] and not sanity.leave
    assert bar.val_progress_bar.totals == [6, 4] and bar.val_progress_bar.n_values == [0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4]
    assert bar.val_progress_bar.descriptions == ["Validation DataLoader 0", "Validation DataLoader 1"]
    trainer.test(model, verbose=False)
    assert bar.test_progress_bar.totals == [6, 4] and bar.test_progress_bar.leave
    assert bar.test_progress_bar.descriptions == ["Testing DataLoader 0", "Testing DataLoader 1"]
    trainer.predict(model)
    assert bar.predict_progress_bar.descriptions == ["Predicting DataLoader 0", "Predicting DataLoader 1"]


def test_tqdm_numbers_prints_and_pickling(monkeypatch, capsys):
    import pickle
    from unittest import mock

    from fulmen.callbacks import TQDMProgressBar
    from fulmen.callbacks.progress.tqdm_progress import Tqdm

    formatted = [Tqdm.format_num(v) for v in (1, 1.0, 0.1, 1e-3, 1e-5, "1.0", "10000", "abc")]
    assert formatted == ["1", "1.000", "0.100", "0.001", "1e-5", "1.000", "10000", "abc"]

    class Printing(BoringModel):
        def training_step(self, batch, batch_idx):
            self.print("in training_step", end="")
            return super().training_step(batch, batch_idx)

    bar = TQDMProgressBar()
    trainer = Trainer(max_steps=1, limit_val_batches=0, callbacks=[bar], logger=False, enable_checkpointing=False,
                      enable_model_summary=False)  # fmt: skip
    with mock.patch("tqdm.tqdm.write") as write:
        trainer.fit(Printing())
    assert write.call_args_list == [mock.call("in training_step", end="")]  # above the bar, not through it
    pickle.loads(pickle.dumps(bar))  # the bars and the trainer stay behind

    monkeypatch.setenv("TQDM_MINITERS", "5")
    assert TQDMProgressBar(refresh_rate=2).refresh_rate == 5


@pytest.mark.parametrize(("rate", "expected"), [(1, 20), (19, 19)])
def test_on_colab_the_default_rate_is_20_and_a_chosen_one_stands(monkeypatch, rate, expected):
    from fulmen.callbacks import TQDMProgressBar

    monkeypatch.setenv("COLAB_GPU", "1")
    assert Trainer(callbacks=TQDMProgressBar(refresh_rate=rate), logger=False).progress_bar_callback.refresh_rate == expected


_FORMAT_NUM_CASES = [
    1, 7, 123456, True, 1.0, 0.12, 12.3456, 123.456, 1234.5678, 99999.0, 1e-5, 0.0001234, 0.0005, -1.5, -12.34,
    -123.4, -0.0001, 0.0, -0.0, float("nan"), float("inf"), 1.5e300, 2**60,
    "1.5", "7", "1234", "12345", "12345.678", "1e-5", "1E3", "nan", "x", "x.y", "abcdef", "", ".",
]  # fmt: skip


@oracle.parity
def test_tqdm_format_num_and_convert_inf_are_lightnings():
    oracle.lightning()
    from lightning.pytorch.callbacks.progress import tqdm_progress as theirs

    from fulmen.callbacks.progress import tqdm_progress as ours

    assert [ours.Tqdm.format_num(v) for v in _FORMAT_NUM_CASES] == [
        theirs.Tqdm.format_num(v) for v in _FORMAT_NUM_CASES
    ]
    for value in (None, float("inf"), -float("inf"), float("nan"), 0, 3, 2.5):
        assert repr(ours.convert_inf(value)) == repr(theirs.convert_inf(value))


def test_tqdm_takes_tqdms_positional_arguments():
    from fulmen.callbacks.progress.tqdm_progress import Tqdm

    out = io.StringIO()
    bar = Tqdm(range(3), "counting", file=out, ncols=0)  # tqdm(iterable, desc, ...)
    assert list(bar) == [0, 1, 2] and bar.desc == "counting"
    assert "counting: 100% 3/3" in out.getvalue()


class _FailsInEpoch1(BoringModel):
    def training_step(self, batch, batch_idx):
        if self.current_epoch == 1 and batch_idx == 3:
            raise ValueError("boom")
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("terminal", [False, True])
def test_tqdm_bars_are_finished_when_an_exception_ends_the_run(monkeypatch, terminal):
    import sys

    from fulmen.callbacks import TQDMProgressBar

    class Stream(io.StringIO):
        def isatty(self):
            return terminal

    out = Stream()
    monkeypatch.setattr(sys, "stdout", out)
    bar = TQDMProgressBar()
    trainer = Trainer(max_epochs=3, limit_train_batches=10, limit_val_batches=2, callbacks=[bar], logger=False,
                      enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    with pytest.raises(ValueError, match="boom"):
        trainer.fit(_FailsInEpoch1())
    text = out.getvalue()
    # the epoch the exception ended is on screen as far as it went, and the output ends with a new line: what
    # the program prints next starts on a line of its own, below the bar
    assert text.endswith("\n") and "3/10" in text.rsplit("Epoch 1", 1)[-1]
    assert bar._train_progress_bar.disable and bar._val_progress_bar.disable  # closed: nothing left for exit
    if not terminal:
        assert [line.split("%")[0] for line in text.splitlines()] == ["Epoch 0: 100", "Epoch 1:  30"]


_SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset
import fulmen

class Model(fulmen.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        if self.current_epoch == 1 and batch_idx == 3:
            raise ValueError("boom")
        return self.layer(batch[0]).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

trainer = fulmen.Trainer(max_epochs=3, logger=False, enable_checkpointing=False, enable_model_summary=False)
try:
    trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(20, 2)), batch_size=2))
except ValueError:
    print("MARKER after the failed fit", flush=True)
"""


@pytest.mark.slow
def test_output_after_a_failed_fit_comes_after_the_bar(tmp_path):
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[-1] == "MARKER after the failed fit", lines
    assert lines[-2].startswith("Epoch 1:  30% 3/10"), lines


def test_the_sanity_check_bars_stay_readable_after_it():
    """Closed, not dropped: a fit that only sanity-checks (limit_train_batches=0) leaves its bar to read."""
    from fulmen.callbacks import TQDMProgressBar

    bar = TQDMProgressBar()
    trainer = Trainer(max_epochs=1, limit_train_batches=0, num_sanity_val_steps=3, callbacks=[bar], logger=False,
                      enable_checkpointing=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(BoringModel())
    assert (bar.val_progress_bar.n, bar.val_progress_bar.total) == (3, 3)
    assert bar.val_progress_bar.desc.startswith("Sanity Checking DataLoader 0")

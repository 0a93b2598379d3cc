"""No hidden host-device syncs: the hot loop converts tensors to Python values only where a value is asked for.

Every conversion that would block on a GPU (``.item()``, ``float(t)``, ``int(t)``, ``bool(t)``, ``.tolist()``,
``.numpy()``, ``.cpu()``) is counted per training step on the CPU, by wrapping those ``Tensor`` methods. The
loop may convert only at a logging step (``log_every_n_steps``: one conversion per metric sent to the
logger) and when the progress bar redraws its metrics; every other step must convert nothing.
"""

from __future__ import annotations

import collections
import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fulmen
from fulmen.callbacks.progress import TQDMProgressBar
from fulmen.loggers import CSVLogger

_CONVERSIONS = ("item", "__float__", "__int__", "__bool__", "__index__", "tolist", "numpy", "cpu")


@pytest.fixture
def conversions(monkeypatch):
    """A counter of tensor-to-host conversions, by method name."""
    counts: collections.Counter[str] = collections.Counter()

    def counting(name, original):
        def wrapper(self, *args, **kwargs):
            counts[name] += 1
            return original(self, *args, **kwargs)

        return wrapper

    for name in _CONVERSIONS:
        monkeypatch.setattr(torch.Tensor, name, counting(name, getattr(torch.Tensor, name)))
    return counts


class PerStep(fulmen.Callback):
    """Conversions during each whole step, from one batch's start to the next one's."""

    def __init__(self, counts):
        self.counts = counts
        self.marks: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.marks.append(sum(self.counts.values()))

    def on_train_epoch_end(self, trainer, pl_module):
        self.marks.append(sum(self.counts.values()))  # closes the epoch's last step

    def deltas(self) -> list[int]:
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def _data(n=64):
    g = torch.Generator().manual_seed(0)
    return DataLoader(
        TensorDataset(torch.randn(n, 8, generator=g), torch.randint(0, 3, (n,), generator=g)), 4
    )


class Logged(fulmen.LightningModule):
    def __init__(self, log: bool = True):
        super().__init__()
        self.net = nn.Linear(8, 3)
        self.logs = log

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self.net(x)
        loss = nn.functional.cross_entropy(logits, y)
        if self.logs:
            self.log("loss", loss, prog_bar=True)
            self.log("acc", (logits.argmax(-1) == y).float().mean(), on_step=True, on_epoch=True)
        return loss

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(opt, 3)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class Manual(Logged):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        opt = self.optimizers()
        loss = super().training_step(batch, batch_idx)
        opt.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(opt, gradient_clip_val=0.5)
        opt.step()
        self.lr_schedulers().step()

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 3)]


def _fit(model, counts, tmp_path, **trainer_kwargs):
    probe = PerStep(counts)
    trainer = fulmen.Trainer(
        max_epochs=1,
        callbacks=[probe, *trainer_kwargs.pop("callbacks", [])],
        default_root_dir=tmp_path,
        enable_model_summary=False,
        **trainer_kwargs,
    )
    trainer.fit(model, _data())
    return probe.deltas(), trainer


def test_a_bare_loop_converts_nothing(conversions, tmp_path):
    deltas, _ = _fit(Logged(log=False), conversions, tmp_path, logger=False, enable_progress_bar=False)
    assert deltas == [0] * 16


@pytest.mark.parametrize("accumulate", [1, 2])
def test_logging_converts_only_at_log_steps(conversions, tmp_path, monkeypatch, accumulate):
    # the progress bar redraws (and reads its metrics) at most every _MIN_DRAW_INTERVAL seconds: never, here
    monkeypatch.setattr(TQDMProgressBar, "_MIN_DRAW_INTERVAL", math.inf)
    deltas, trainer = _fit(
        Logged(),
        conversions,
        tmp_path,
        logger=CSVLogger(tmp_path),
        log_every_n_steps=3,
        gradient_clip_val=0.5,
        accumulate_grad_batches=accumulate,
    )
    assert len(deltas) == 16
    # a logging step (one that closes an accumulation window, every third optimizer step) sends 'loss' and
    # 'acc_step' to the logger: two conversions, and nothing else converts anywhere
    expected = []
    stepped = 0
    for batch_idx in range(16):
        closes_window = (batch_idx + 1) % accumulate == 0
        expected.append(2 if closes_window and (stepped + 1) % 3 == 0 else 0)
        stepped += closes_window
    assert deltas == expected, conversions
    assert trainer.global_step == 16 // accumulate


def test_manual_optimization_converts_only_at_log_steps(conversions, tmp_path, monkeypatch):
    monkeypatch.setattr(TQDMProgressBar, "_MIN_DRAW_INTERVAL", math.inf)
    deltas, _ = _fit(Manual(), conversions, tmp_path, logger=CSVLogger(tmp_path), log_every_n_steps=5)
    assert deltas == [2 if (i + 1) % 5 == 0 else 0 for i in range(16)]


def test_the_progress_bar_converts_only_when_it_redraws_its_metrics(conversions, tmp_path, monkeypatch):
    """With no logger, the only conversions are the bar's metric reads: at most one per shown metric per
    redraw, and redraws are rate-limited, so a fast loop converts on few of its steps."""
    reads = []
    original = TQDMProgressBar.get_metrics

    def counting_get_metrics(self, trainer, pl_module):
        reads.append(sum(conversions.values()))
        return original(self, trainer, pl_module)

    monkeypatch.setattr(TQDMProgressBar, "get_metrics", counting_get_metrics)
    monkeypatch.setattr(TQDMProgressBar, "_MIN_DRAW_INTERVAL", math.inf)
    deltas, _ = _fit(Logged(), conversions, tmp_path, logger=False)
    assert deltas == [0] * 16  # reads are forced only at the epoch's end, after the last step
    assert len(reads) >= 1

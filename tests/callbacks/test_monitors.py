"""DeviceStatsMonitor (psutil on the CPU) and ThroughputMonitor (counts, rates, FLOPs from
torch.utils.flop_counter): the keys and logging steps Lightning's write, with values that hold up."""

from __future__ import annotations

import csv

import pytest
import torch

import fulmen
from fulmen.callbacks import DeviceStatsMonitor, ThroughputMonitor
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.throughput import measure_flops
from tests.parity import oracle


def _rows(folder):
    with open(folder / "lightning_logs" / "version_0" / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _fit(pl, callback, folder, model=None, **kwargs):
    from lightning.pytorch.demos.boring_classes import BoringModel as LBoring

    from fulmen.demos.boring_classes import BoringModel

    model = model or (BoringModel() if pl is fulmen else LBoring())
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=6, limit_val_batches=2, log_every_n_steps=2,
                         callbacks=[callback], logger=pl.loggers.CSVLogger(folder), enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=folder, **kwargs)  # fmt: skip
    trainer.fit(model)
    return _rows(folder)


@oracle.parity
def test_device_stats_keys_and_steps_as_lightning(tmp_path):
    pytest.importorskip("psutil", reason="the test extras install psutil")
    pl = oracle.lightning()
    ours = _fit(fulmen, DeviceStatsMonitor(), tmp_path / "f", num_sanity_val_steps=0)
    theirs = _fit(pl, pl.callbacks.DeviceStatsMonitor(), tmp_path / "l", num_sanity_val_steps=0)
    assert set(ours[0]) == set(theirs[0])
    assert "DeviceStatsMonitor.on_train_batch_end/cpu_percent" in ours[0]

    def train_steps(rows):
        return sorted({r["step"] for r in rows if r["DeviceStatsMonitor.on_train_batch_end/cpu_vm_percent"]})

    assert train_steps(ours) == train_steps(theirs) == ["1", "3", "5"]
    assert all(0 < float(r["DeviceStatsMonitor.on_train_batch_end/cpu_vm_percent"]) <= 100
               for r in ours if r["DeviceStatsMonitor.on_train_batch_end/cpu_vm_percent"])  # fmt: skip


def test_device_stats_needs_a_logger():
    trainer = fulmen.Trainer(max_epochs=1, limit_train_batches=1, callbacks=[DeviceStatsMonitor()], logger=False,
                             enable_progress_bar=False)  # fmt: skip
    from fulmen.demos.boring_classes import BoringModel

    with pytest.raises(MisconfigurationException, match="logger=False"):
        trainer.fit(BoringModel())


def _flops_module(pl):
    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(32, 2)

        def configure_model(self):
            with torch.device("meta"):
                layer = torch.nn.Linear(32, 2)
                x = torch.randn(2, 32)
            self.flops_per_batch = measure_flops(layer, lambda: layer(x))

        def training_step(self, batch, batch_idx):
            return self.layer(batch).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            self.log("v", self.layer(batch).sum())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.randn(12, 32), batch_size=2)

        def val_dataloader(self):
            return torch.utils.data.DataLoader(torch.randn(4, 32), batch_size=2)

    return Model()


@oracle.parity
def test_throughput_keys_counts_and_flops_as_lightning(tmp_path):
    pl = oracle.lightning()
    from lightning.fabric.utilities.throughput import measure_flops as l_measure

    layer, x = torch.nn.Linear(32, 2, device="meta"), torch.randn(2, 32, device="meta")
    assert measure_flops(layer, lambda: layer(x)) == l_measure(layer, lambda: layer(x)) == 256

    def monitor(mod):
        return mod.callbacks.ThroughputMonitor(batch_size_fn=lambda b: b.size(0), length_fn=lambda b: b.numel(),
                                               window_size=2)  # fmt: skip

    ours = _fit(fulmen, monitor(fulmen), tmp_path / "f", model=_flops_module(fulmen), num_sanity_val_steps=0)
    theirs = _fit(pl, monitor(pl), tmp_path / "l", model=_flops_module(pl), num_sanity_val_steps=0)
    train_keys = {k for r in ours for k, v in r.items() if v and k.startswith("train/")}
    assert train_keys == {k for r in theirs for k, v in r.items() if v and k.startswith("train/")}
    assert train_keys >= {"train/samples", "train/device/flops_per_sec", "train/device/items_per_sec"}

    def train_rows(rows):
        return [(r["step"], r["train/batches"], r["train/samples"], r["train/lengths"]) for r in rows if r.get("train/batches")]

    assert train_rows(ours) == train_rows(theirs) == [("1", "2", "4", "128"), ("3", "4", "8", "256"), ("5", "6", "12", "384")]
    for r in ours:
        if r.get("train/device/flops_per_sec"):  # 256 FLOPs per batch, at the measured batch rate
            assert float(r["train/device/flops_per_sec"]) == pytest.approx(256 * float(r["train/device/batches_per_sec"]))
    assert [r["validate/batches"] for r in ours if r.get("validate/batches")] == ["2"]


def test_throughput_window_must_hold_two_points():
    from fulmen.callbacks.throughput_monitor import Throughput

    with pytest.raises(ValueError, match="window_size=1"):
        Throughput(window_size=1)
    with pytest.raises(TypeError, match="batch_size_fn"):
        ThroughputMonitor(batch_size_fn=3)

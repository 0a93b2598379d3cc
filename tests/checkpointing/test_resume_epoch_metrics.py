"""Epoch values of ``self.log(..., on_epoch=True)`` across a mid-epoch resume: the aggregates of the batches
trained before the checkpoint are in it, so the resumed epoch reports what the uninterrupted run reported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torchmetrics
from torch.utils.data import DataLoader

import fulmen
from fulmen.callbacks import Callback, ModelCheckpoint
from fulmen.demos.boring_classes import BoringModel, RandomDataset


class Logging(BoringModel):
    def __init__(self) -> None:
        super().__init__()
        self.mean_metric = torchmetrics.MeanMetric()

    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        value = float(batch_idx + 10 * self.current_epoch)
        self.log("mean_v", value, on_step=False, on_epoch=True, batch_size=1 + batch_idx % 3)
        self.log("sum_v", value, on_step=False, on_epoch=True, reduce_fx="sum")
        self.log("max_v", -abs(value - 3.0), on_step=False, on_epoch=True, reduce_fx="max")
        self.log("min_v", value, on_step=True, on_epoch=True, reduce_fx="min")
        self.mean_metric.update(torch.tensor(value * 2))
        self.log("metric_v", self.mean_metric, on_step=False, on_epoch=True)
        return out


class EpochValues(Callback):
    def __init__(self) -> None:
        self.seen: list[dict[str, float]] = []

    def on_train_epoch_end(self, trainer, pl_module):
        names = ("mean_v", "sum_v", "max_v", "min_v_epoch", "metric_v")
        self.seen.append({k: float(trainer.callback_metrics[k]) for k in names})


def _fit(root, ckpt_path=None, every=None):
    values = EpochValues()
    callbacks: list = [values]
    if every is not None:
        callbacks.append(ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=every, save_top_k=-1))
    trainer = fulmen.Trainer(max_epochs=2, limit_val_batches=0, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=root, callbacks=callbacks,
                             enable_checkpointing=every is not None)  # fmt: skip
    trainer.fit(Logging(), DataLoader(RandomDataset(32, 16), batch_size=2), ckpt_path=ckpt_path)
    return values.seen


@pytest.mark.parametrize("step", [3, 11])  # mid first epoch, mid second epoch (8 batches an epoch)
def test_a_resumed_epoch_reports_the_uninterrupted_runs_epoch_values(tmp_path, step):
    uninterrupted = _fit(tmp_path / "a", every=1)
    epoch = (step - 1) // 8
    resumed = _fit(tmp_path / "b", ckpt_path=tmp_path / "a" / "ckpt" / f"epoch={epoch}-step={step}.ckpt")
    assert resumed == uninterrupted[epoch:]
    assert uninterrupted[0]["sum_v"] == sum(range(8)) and uninterrupted[1]["metric_v"] == 2 * (10 + 3.5)


@pytest.mark.slow
def test_each_process_resumes_its_own_epoch_values(tmp_path):
    """Two DDP processes: each holds its own part of the epoch aggregates; all parts are in the checkpoint and
    each process gets its own back (and `sync_dist` values reduce them as the uninterrupted run did)."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update(PYTHONPATH=str(root), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    # one launch: the whole run, then a new fit resuming its checkpoint after step 3 (epoch_metrics_ddp.py)
    script = [sys.executable, str(Path(__file__).with_name("epoch_metrics_ddp.py")), str(tmp_path)]
    proc = subprocess.run(script, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    for rank in (0, 1):
        whole = torch.load(tmp_path / f"whole-rank{rank}.pt")
        assert torch.load(tmp_path / f"resume-rank{rank}.pt") == whole
    assert whole[0]["own_max"] == 107.0 and whole[0]["synced_sum"] == 2 * sum(range(8)) + 8 * 100

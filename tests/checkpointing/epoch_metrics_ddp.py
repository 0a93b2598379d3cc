"""Two DDP processes (fulmen's own launcher) logging per-rank epoch values; run by test_resume_epoch_metrics.

Usage: ``python epoch_metrics_ddp.py OUTDIR``: the same two processes first run ``whole`` (checkpoints after
every step), then ``resume`` a new Trainer and model from the whole run's checkpoint after step 3 (a fresh fit
restores everything from the checkpoint, as a new launch would; one launch instead of two saves a start of both
processes). Each rank writes OUTDIR/<mode>-rank<R>.pt: the epoch values it saw at each epoch end.
"""

from __future__ import annotations

import sys

import torch
from torch.utils.data import DataLoader

import fulmen
from fulmen.callbacks import Callback, ModelCheckpoint
from fulmen.demos.boring_classes import BoringModel, RandomDataset


class RankLogging(BoringModel):
    def training_step(self, batch, batch_idx):
        value = float(batch_idx + 10 * self.current_epoch + 100 * self.global_rank)
        self.log("own_mean", value, on_step=False, on_epoch=True, batch_size=1 + batch_idx % 3)
        self.log("own_max", value, on_step=False, on_epoch=True, reduce_fx="max")
        self.log("synced_sum", value, on_step=False, on_epoch=True, reduce_fx="sum", sync_dist=True)
        return super().training_step(batch, batch_idx)


class EpochValues(Callback):
    def __init__(self) -> None:
        self.seen: list[dict[str, float]] = []

    def on_train_epoch_end(self, trainer, pl_module):
        self.seen.append({k: float(trainer.callback_metrics[k]) for k in ("own_mean", "own_max", "synced_sum")})


def main(out: str, mode: str, ckpt: str | None = None) -> None:
    fulmen.seed_everything(1)
    values = EpochValues()
    callbacks = [values, ModelCheckpoint(dirpath=f"{out}/ckpt", every_n_train_steps=1, save_top_k=-1)]
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=2, limit_val_batches=0,
                             logger=False, enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir=out, callbacks=callbacks)  # fmt: skip
    trainer.fit(RankLogging(), DataLoader(RandomDataset(32, 32), batch_size=2), ckpt_path=ckpt)
    torch.save(values.seen, f"{out}/{mode}-rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1], "whole")
    main(sys.argv[1], "resume", f"{sys.argv[1]}/ckpt/epoch=0-step=3.ckpt")

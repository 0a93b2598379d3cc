"""The training script of the elastic tests, started by ``torchrun --nnodes=MIN:MAX`` agents (one per "node").

Each (re)start is a fresh fit on however many processes torchrun gives it, continuing from the newest complete
checkpoint (``ckpt_path="last"``); ``GlobalBatchSize(16)`` keeps 16 samples per optimizer step (4 per process
and batch: one batch per step on 4 processes, two on 2). Every process appends what each of its batches trained
to ``OUT/samples-w<world size>-s<first step>-p<port>-r<rank>.txt`` (``time global_step epoch indices``), and rank 0 the final weights to
``OUT/final.pt``. In the job's first start (from step 0) a batch sleeps ``PACE`` seconds, so that the test can
kill a node, or add one, while that start trains; the starts after the change (resumed from a checkpoint) train
at full speed, as nothing has to happen while they run.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import fulmen
from fulmen.callbacks import GlobalBatchSize, ModelCheckpoint
from tests.strategies.fsdp_model import Wide, indexed_loader

GLOBAL_BATCH = 16
EPOCHS = 3


class Recorded(Wide):
    def __init__(self, out: Path) -> None:
        super().__init__()
        self.out = out
        self.pace = float(os.environ.get("PACE", "0"))

    def on_train_start(self):
        # one file per process and start: the start's world size and the step it continued from
        world, port = self.trainer.world_size, os.environ["MASTER_PORT"]
        self.record = self.out / f"samples-w{world}-s{self.trainer.global_step}-p{port}-r{self.global_rank}.txt"
        if self.trainer.global_step > 0:  # a restart: the node was lost or has joined already
            self.pace = 0.0

    def training_step(self, batch, batch_idx):
        index = batch[2].tolist()
        with open(self.record, "a") as f:
            f.write(f"{time.time()} {self.trainer.global_step} {self.current_epoch} {' '.join(map(str, index))}\n")
        time.sleep(self.pace)
        return super().training_step(batch, batch_idx)


def main() -> None:
    out = Path(sys.argv[1])
    world, local = int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_WORLD_SIZE"])
    model = Recorded(out)
    trainer = fulmen.Trainer(
        accelerator="cpu", strategy="ddp", devices=local, num_nodes=world // local, max_epochs=EPOCHS,
        callbacks=[GlobalBatchSize(GLOBAL_BATCH),
                   ModelCheckpoint(dirpath=out / "checkpoints", save_last=True, save_top_k=0, every_n_train_steps=1)],
        logger=False, enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
    )  # fmt: skip
    trainer.fit(model, indexed_loader(4), ckpt_path="last")
    if trainer.is_global_zero:
        torch.save(model.state_dict(), out / "final.pt")


if __name__ == "__main__":
    main()

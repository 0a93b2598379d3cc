"""Two DDP processes (fulmen's own launcher, gloo) where rank HANG_RANK stops in ``training_step`` (sleeps) at
its third batch; run by test_hang.py with FULMEN_HANG_TIMEOUT set: both processes must end, each reporting.

Usage: ``python hang_script.py OUTDIR``.
"""

from __future__ import annotations

import os
import sys
import time

from torch.utils.data import DataLoader

import fulmen
from fulmen.demos.boring_classes import BoringModel, RandomDataset


class Stops(BoringModel):
    def training_step(self, batch, batch_idx):
        if self.global_rank == int(os.environ["HANG_RANK"]) and batch_idx == 2:
            print(f"rank {self.global_rank} stops entering collectives", flush=True)
            time.sleep(3600)
        return super().training_step(batch, batch_idx)


def main(out: str) -> None:
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, limit_val_batches=0,
                             logger=False, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=False, default_root_dir=out)  # fmt: skip
    trainer.fit(Stops(), DataLoader(RandomDataset(32, 64), batch_size=2))


if __name__ == "__main__":
    main(sys.argv[1])

"""Run by tests/utilities/test_distributed.py under torchrun (two processes, gloo): is_shared_filesystem through a
real DDP strategy's collectives, with Lightning Fabric's function on the same strategy as the oracle.
Writes rank<N>.json into the folder given as the first argument."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import fulmen
from fulmen.demos.boring_classes import BoringModel
from fulmen.utilities import is_shared_filesystem


class Check(fulmen.Callback):
    def __init__(self, out: Path) -> None:
        self.out = out

    def on_fit_start(self, trainer, pl_module):
        from lightning.fabric.utilities.distributed import (
            is_shared_filesystem as lightning_is_shared_filesystem,
        )

        strategy, rank = trainer.strategy, trainer.global_rank
        (self.out / "shared").mkdir(exist_ok=True)
        (self.out / "shared" / "file.txt").write_text("x")
        (self.out / f"rank{rank}").mkdir(exist_ok=True)
        strategy.barrier()
        paths = {"cwd": None, "shared": self.out / "shared", "file": self.out / "shared" / "file.txt",
                 "per_rank": self.out / f"rank{rank}", "remote": "memory://bucket/run"}  # fmt: skip
        results = {}
        for name, path in paths.items():
            results[name] = [is_shared_filesystem(strategy, path), lightning_is_shared_filesystem(strategy, path)]
        try:  # the processes agree on raising: none is left waiting in a collective
            is_shared_filesystem(strategy, self.out / "missing")
            results["missing"] = "no error"
        except FileNotFoundError as err:
            results["missing"] = str(err)
        results["leftover_marker"] = (self.out / "shared" / ".lightning_shared_fs_check").exists()
        (self.out / f"rank{rank}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    out = Path(sys.argv[1])
    os.chdir(out)
    trainer = fulmen.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_steps=1, limit_val_batches=0,
                             logger=False, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=False, callbacks=[Check(out)])  # fmt: skip
    trainer.fit(BoringModel())

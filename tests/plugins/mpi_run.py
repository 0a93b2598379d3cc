"""Run under ``mpiexec -n 2``: each rank writes what fulmen's and Lightning's MPIEnvironment answer, then fits a
model with DDP on gloo, its ranks and rendezvous taken from MPI (see test_cluster_environments.py)."""

from __future__ import annotations

import json
import sys
import warnings

import torch

import fulmen
from fulmen.demos.boring_classes import BoringModel
from fulmen.plugins.environments import MPIEnvironment


def main(out: str) -> None:
    warnings.filterwarnings("ignore")
    from lightning.pytorch.plugins.environments import MPIEnvironment as Theirs

    ours, theirs = MPIEnvironment(), Theirs()
    methods = ("world_size", "global_rank", "local_rank", "node_rank")
    answers = {"ours": [getattr(ours, m)() for m in methods] + [ours.main_address, ours.detect()],
               "theirs": [getattr(theirs, m)() for m in methods] + [theirs.main_address, Theirs.detect()]}  # fmt: skip
    # without the plugin, the MPI job is detected (as Lightning does): the same layout
    detected = fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    answers["detected"] = [detected.world_size, detected.global_rank, detected.local_rank, detected.node_rank]
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp", plugins=[ours], max_steps=2,
                             limit_val_batches=0, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    model = BoringModel()
    trainer.fit(model)
    weights = model.layer.weight.detach().clone()
    gathered = [torch.zeros_like(weights) for _ in range(2)]
    torch.distributed.all_gather(gathered, weights)
    answers["fit"] = {"world": trainer.world_size, "rank": trainer.global_rank, "step": trainer.global_step,
                      "same_weights": bool(torch.equal(gathered[0], gathered[1]))}  # fmt: skip
    with open(f"{out}/rank{ours.global_rank()}.json", "w") as f:
        json.dump(answers, f)


if __name__ == "__main__":
    main(sys.argv[1])

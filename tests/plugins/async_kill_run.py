"""A run that writes its checkpoints in the background, for the SIGKILL test in tests/plugins/test_async_io.py.

    python async_kill_run.py CHECKPOINT_DIR [--resume]

It reads a line from stdin before it starts (the test starts the next run while one trains, so that the
imports of the next overlap the training of this one).

``AsyncCheckpointIO`` with ``ModelCheckpoint(save_last=True, every_n_train_steps=1)`` over a 16 MB weight, so
each background write takes a while (the test kills the process while one runs). The weight starts at 0 and
has gradient 1 everywhere, and SGD steps with lr=1: after step N every element is exactly -N, so a checkpoint
whose weights are not all -global_step mixes two steps. Prints ``start G`` (the global step training starts
from) and, at the end, ``end G``.
"""

from __future__ import annotations

import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fulmen
from fulmen.callbacks import Callback, ModelCheckpoint
from fulmen.plugins import AsyncCheckpointIO

STEPS = 8
ELEMENTS = 4 * 1024 * 1024  # 16 MB of float32


class Big(fulmen.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(ELEMENTS))

    def training_step(self, batch, batch_idx):
        return self.weight.sum() + 0 * batch[0].sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1.0)


class Report(Callback):
    def on_train_start(self, trainer, pl_module):
        print(f"start {trainer.global_step}", flush=True)


def main() -> None:
    directory, resume = sys.argv[1], "--resume" in sys.argv
    sys.stdin.readline()  # its turn
    torch.set_num_threads(1)
    checkpoint = ModelCheckpoint(dirpath=directory, save_last=True, every_n_train_steps=1)
    trainer = fulmen.Trainer(
        max_epochs=1, limit_val_batches=0, plugins=[AsyncCheckpointIO()], callbacks=[Report(), checkpoint],
        logger=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    model = Big()
    trainer.fit(model, DataLoader(TensorDataset(torch.zeros(STEPS, 1)), batch_size=1),
                ckpt_path="last" if resume else None)  # fmt: skip
    assert torch.equal(model.weight.detach(), torch.full((ELEMENTS,), -float(trainer.global_step)))
    print(f"end {trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()

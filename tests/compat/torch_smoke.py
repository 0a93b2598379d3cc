"""A multi-process fit with checkpoints written in the background, then resumed: the check CI runs on every torch
fulmen admits, each in a virtual environment holding torch and fulmen's declared dependencies only.

Usage: ``python tests/compat/torch_smoke.py OUTDIR``. Two CPU processes (fulmen's launcher, gloo) run:

1. DDP with ``AsyncCheckpointIO``, ``ModelCheckpoint(every_n_train_steps=2, save_last=True)`` and a class among
   the module's hyperparameters (what ``activation=nn.Tanh`` init arguments record): fit 6 steps, then a new
   Trainer in the same processes resumes from ``last.ckpt`` to step 8. Its weights must equal those of one
   uninterrupted 8-step fit.
2. FSDP with sharded checkpoints written in the background at every step (DCP's async save and its stager,
   several saves in one run), then a fit resumed from the step-2 checkpoint to step 4, which must end with the
   weights of the uninterrupted fit.

It prints ``torch smoke passed on torch <version>`` and exits 0, or fails with the first difference.
"""

from __future__ import annotations

import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fulmen
from fulmen.callbacks import ModelCheckpoint
from fulmen.plugins import AsyncCheckpointIO
from fulmen.strategies import FSDPStrategy


class Net(fulmen.LightningModule):
    def __init__(self, activation: type[nn.Module] = nn.Tanh) -> None:
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 16), activation(), nn.Linear(16, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.05)


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=g)
    return DataLoader(TensorDataset(x, (x.sum(1) > 0).long()), batch_size=4)  # 8 steps per process on 2


def trainer(directory: str, steps: int, strategy: object, every: int) -> fulmen.Trainer:
    checkpoints = ModelCheckpoint(dirpath=directory, every_n_train_steps=every, save_top_k=-1, save_last=True)
    return fulmen.Trainer(
        accelerator="cpu", devices=2, strategy=strategy, max_steps=steps, plugins=[AsyncCheckpointIO()],
        callbacks=[checkpoints], logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=directory,
    )  # fmt: skip


def weights(module: nn.Module) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
    return {k: v.detach().clone() for k, v in get_model_state_dict(module, options=options).items()}


def same(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor], what: str) -> None:
    for key, tensor in expected.items():
        if not torch.equal(got[key], tensor):
            raise AssertionError(f"{what}: {key} differs from the uninterrupted fit's")


def ddp(out: str) -> None:
    whole = Net()
    trainer(os.path.join(out, "ddp-whole"), 8, "ddp", 2).fit(whole, loader())
    first = trainer(os.path.join(out, "ddp"), 6, "ddp", 2)
    first.fit(Net(), loader())
    resumed, again = Net(), trainer(os.path.join(out, "ddp"), 8, "ddp", 2)
    # the class among the hyperparameters needs the caller's trust to be loaded
    again.fit(resumed, loader(), ckpt_path=os.path.join(out, "ddp", "last.ckpt"), weights_only=False)
    assert again.global_step == 8, again.global_step
    same(whole.state_dict(), resumed.state_dict(), "DDP resumed from last.ckpt")


def fsdp(out: str) -> None:
    whole = Net()
    trainer(os.path.join(out, "fsdp"), 4, FSDPStrategy(state_dict_type="sharded"), 1).fit(whole, loader())
    expected = weights(whole)
    resumed, again = Net(), trainer(os.path.join(out, "fsdp-resumed"), 4, FSDPStrategy(state_dict_type="sharded"), 1)
    step_2 = os.path.join(out, "fsdp", "epoch=0-step=2.ckpt")
    again.fit(resumed, loader(), ckpt_path=step_2, weights_only=False)
    same(expected, weights(resumed), "FSDP resumed from a sharded checkpoint written in the background")


def main(out: str) -> None:
    ddp(out)
    fsdp(out)
    if int(os.environ.get("RANK", "0")) == 0:
        print(f"torch smoke passed on torch {torch.__version__}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

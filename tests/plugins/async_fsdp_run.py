"""Sharded FSDP checkpoints written in the background, for tests/plugins/test_async_io.py (torchrun, gloo).

Usage: ``torchrun --nproc_per_node=2 async_fsdp_run.py OUTDIR``. The same 4-step training runs twice, with
sharded checkpoints at every step (every one kept in ``all/``; the newest plus ``last`` in ``rotated/``):
written synchronously (``OUTDIR/sync``), then with ``AsyncCheckpointIO`` (``OUTDIR/async``); then a run resumes
from the background-written checkpoint of step 2 (with ``AsyncCheckpointIO`` too). Each rank writes
``OUTDIR/rank<R>.pt``: the final weights of the three runs and the threads that completed the background saves.
"""

from __future__ import annotations

import os
import sys
import threading

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fulmen
from fulmen.callbacks import ModelCheckpoint
from fulmen.checkpoint import sharded as distributed_checkpoint
from fulmen.plugins import AsyncCheckpointIO
from fulmen.strategies import FSDPStrategy


class Net(fulmen.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=g)
    return DataLoader(TensorDataset(x, (x.sum(1) > 0).long()), batch_size=4)  # 4 steps per rank on 2 ranks


def full_weights(module: nn.Module) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
    return {k: v.detach().clone() for k, v in get_model_state_dict(module, options=options).items()}


def fit(directory: str, background: bool, ckpt_path: str | None = None) -> dict[str, torch.Tensor]:
    keep_all = ModelCheckpoint(dirpath=os.path.join(directory, "all"), every_n_train_steps=1, save_top_k=-1)
    rotated = ModelCheckpoint(dirpath=os.path.join(directory, "rotated"), every_n_train_steps=1, save_last=True)
    trainer = fulmen.Trainer(
        accelerator="cpu", devices=2, strategy=FSDPStrategy(state_dict_type="sharded"), max_epochs=1,
        plugins=[AsyncCheckpointIO()] if background else None, callbacks=[keep_all, rotated], logger=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    model = Net()
    trainer.fit(model, loader(), ckpt_path=ckpt_path)
    return full_weights(model)


def main(out: str) -> None:
    completed_on: set[str] = set()
    complete = distributed_checkpoint._complete

    def noting_the_thread(*args, **kwargs):
        completed_on.add(threading.current_thread().name)
        return complete(*args, **kwargs)

    distributed_checkpoint._complete = noting_the_thread  # type: ignore[assignment]
    sync = fit(os.path.join(out, "sync"), background=False)
    sync_threads, completed_on = completed_on, set()
    background = fit(os.path.join(out, "async"), background=True)
    step_2 = os.path.join(out, "async", "all", "epoch=0-step=2.ckpt")
    resumed = fit(os.path.join(out, "resumed"), background=True, ckpt_path=step_2)
    rank = int(os.environ["RANK"])
    torch.save({"sync": sync, "async": background, "resumed": resumed, "sync_threads": sorted(sync_threads),
                "async_threads": sorted(completed_on)}, os.path.join(out, f"rank{rank}.pt"))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])

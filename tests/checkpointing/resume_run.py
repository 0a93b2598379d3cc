"""A training run for the exact-resume tests, meant to be killed with SIGKILL and resumed.

    python resume_run.py OUT_DIR [--kill KIND:N] [--resume] [--reference] [--workers W]

KIND:N kills the process (SIGKILL, from inside, so the point is exact) at global batch N (epoch * batches
per epoch + batch index): ``start`` before the batch runs, ``end`` after its checkpoint, ``val`` in the
middle of a validation run, ``epoch`` at the end of epoch N, ``save`` halfway through writing a checkpoint; ``term`` and ``int`` send
SIGTERM / SIGINT instead (handled: the run saves and stops by itself); valterm:N sends SIGTERM during the
validation run after global batch N (-1: never; the validation batches are printed).
The run uses every RNG (torch, numpy, python), dropout, shuffled training and validation data, momentum,
a step and an epoch scheduler and gradient accumulation (AUGMENT=1: random augmentation in the training
dataset's ``__getitem__`` too); it prints ``batch N`` as it goes and writes the
final weights to OUT_DIR/final.pt.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fulmen
from fulmen.callbacks import Callback, ModelCheckpoint
from fulmen.checkpoint import files as checkpoint_io

BATCHES_PER_EPOCH = 13  # 100 samples, batch size 8: the last batch is partial


def _data(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return TensorDataset(x, (x.sum(1) > 0).long())


class Augmented(torch.utils.data.Dataset):
    """``data`` with random augmentation drawn in ``__getitem__`` from all three global generators (AUGMENT=1)."""

    def __init__(self, data: TensorDataset) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int):
        x, y = self.data[index]
        noise = torch.randn_like(x) * 0.1 + float(np.random.rand()) * 0.1 + random.random() * 0.1
        return x + noise, y


class Net(fulmen.LightningModule):
    def __init__(self, workers: int = 0) -> None:
        super().__init__()
        self.workers = workers
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.3), nn.Linear(16, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        jitter = torch.randn_like(x) * 0.01 + float(np.random.rand()) * 1e-3 + random.random() * 1e-3
        loss = nn.functional.cross_entropy(self.net(x + jitter), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(x), y) + torch.rand(()) * 0)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        step = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.9)
        epoch = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.95)
        return [opt], [{"scheduler": step, "interval": "step"}, {"scheduler": epoch, "interval": "epoch"}]

    def train_dataloader(self):
        data = _data(100, 0)
        return DataLoader(Augmented(data) if os.environ.get("AUGMENT") == "1" else data, batch_size=8, shuffle=True,
                          num_workers=self.workers,
                          persistent_workers=self.workers > 0 and os.environ.get("PERSIST") == "1")  # fmt: skip

    def val_dataloader(self):
        return DataLoader(_data(40, 1), batch_size=10, shuffle=True)


def _global_batch(trainer) -> int:
    return trainer.current_epoch * BATCHES_PER_EPOCH + trainer.run_context.progress.batch_idx - 1


class Saver(Callback):
    """Checkpoint at every batch end, every validation end and every epoch end (one file, always the newest)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        print(f"batch {_global_batch(trainer)}", flush=True)
        trainer.save_checkpoint(self.path)

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            trainer.save_checkpoint(self.path)

    def on_train_epoch_end(self, trainer, pl_module):
        trainer.save_checkpoint(self.path)


class Killer(Callback):
    def __init__(self, kind: str, n: int) -> None:
        self.kind, self.n = kind, n

    @staticmethod
    def _die() -> None:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.kind == "start" and trainer.current_epoch * BATCHES_PER_EPOCH + batch_idx == self.n:
            self._die()
        if self.kind == "save" and trainer.current_epoch * BATCHES_PER_EPOCH + batch_idx == self.n:
            _kill_during_next_save()
        if self.kind in ("term", "int") and trainer.current_epoch * BATCHES_PER_EPOCH + batch_idx == self.n:
            os.kill(os.getpid(), signal.SIGTERM if self.kind == "term" else signal.SIGINT)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.kind == "end" and _global_batch(trainer) == self.n:
            self._die()

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if self.kind == "valterm" and not trainer.sanity_checking:
            print(f"validation {_global_batch(trainer)} {batch_idx}", flush=True)
            if _global_batch(trainer) == self.n and batch_idx == 1:
                os.kill(os.getpid(), signal.SIGTERM)
        if (
            self.kind == "val"
            and not trainer.sanity_checking
            and _global_batch(trainer) == self.n
            and batch_idx == 1
        ):
            self._die()

    def on_train_epoch_end(self, trainer, pl_module):
        if self.kind == "epoch" and trainer.current_epoch == self.n:
            self._die()


def _kill_during_next_save() -> None:
    """Make the next checkpoint write stop (SIGKILL) after half of its bytes reached the disk."""
    real_save = torch.save

    def half_then_die(obj, f, *args, **kwargs):
        import io

        buffer = io.BytesIO()
        real_save(obj, buffer, *args, **kwargs)
        data = buffer.getvalue()
        f.write(data[: len(data) // 2])
        f.flush()
        os.fsync(f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

    checkpoint_io.torch.save = half_then_die  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--kill", default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    os.makedirs(args.out, exist_ok=True)
    fulmen.seed_everything(42)
    ckpt_dir = os.path.join(args.out, "checkpoints")
    callbacks: list[Callback] = []
    if not args.reference:
        callbacks = [Saver(os.path.join(ckpt_dir, "last.ckpt")),
                     ModelCheckpoint(dirpath=ckpt_dir, every_n_train_steps=1, save_last=True, save_top_k=1,
                                     enable_version_counter=False)]  # fmt: skip
        if args.kill:
            kind, n = args.kill.split(":")
            callbacks.insert(1, Killer(kind, int(n)))
    trainer = fulmen.Trainer(
        deterministic=True if os.environ.get("DETERMINISTIC") else None,  # benchmarks/gpu_checks.py on CUDA
        max_epochs=4, accumulate_grad_batches=3, val_check_interval=5, num_sanity_val_steps=2,
        callbacks=callbacks, logger=False, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=not args.reference, default_root_dir=args.out,
    )  # fmt: skip
    model = Net(args.workers)
    trainer.fit(model, ckpt_path="last" if args.resume else None)
    if trainer.interrupted:
        print("interrupted", flush=True)
        return
    torch.save(model.state_dict(), os.path.join(args.out, "final.pt"))


if __name__ == "__main__":
    main()

"""The modules and data of the DDP tests, shared by the torchrun scripts (fulmen's and Lightning's) and the
single-process references. The modules are built on a framework namespace (fulmen or lightning.pytorch) so
that both frameworks run the same user code."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fulmen

CASES = {"plain": {}, "accumulate": {"accumulate_grad_batches": 2}}


def model_classes(pl: Any) -> tuple[type, type]:
    """(Model, GAN) subclassing ``pl.LightningModule``."""
    from tests.core.optimization_examples import examples

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
            self.samples = 0

        def training_step(self, batch, batch_idx):
            x, y = batch
            self.samples += len(x)
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.log("loss", loss, on_step=True, on_epoch=True, sync_dist=True)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.3, momentum=0.9)

    class GAN(examples(pl)["ToggledGAN"]):  # type: ignore[misc]
        """Seed 001's GAN (manual optimization, toggle_model(sync_grad=...) accumulating over two batches).
        Its noise comes with the data instead of from each process's random generator, so that two processes
        and one process on the global batch draw the same noise for the same samples."""

        def on_train_batch_start(self, batch, batch_idx):
            self._noise = batch[1]

        def sample_z(self, n):
            return self._noise[:n]

    return Model, GAN


def seeded_model_class(pl: Any) -> type:
    """Dropout and a validation step: with ``seed_everything`` the masks, the training and validation shuffles
    and the sanity check's draws must come out as Lightning's on every rank."""

    class Seeded(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Dropout(0.3), nn.Linear(16, 3))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", nn.functional.cross_entropy(self.net(x), y), sync_dist=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.3, momentum=0.9)

    return Seeded


def _module_level(cls: type) -> type:
    cls.__qualname__ = cls.__name__  # picklable by name (ddp_spawn pickles the module for its workers)
    return cls


Model, GAN = (_module_level(cls) for cls in model_classes(fulmen))


def loader(batch_size: int, shuffle: bool = False) -> DataLoader:
    g = torch.Generator().manual_seed(5)
    data = TensorDataset(torch.randn(64, 6, generator=g), torch.randint(0, 3, (64,), generator=g))
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle)


def gan_loader(batch_size: int) -> DataLoader:
    g = torch.Generator().manual_seed(7)
    data = TensorDataset(torch.randn(48, 6, generator=g), torch.randn(48, 4, generator=g))
    return DataLoader(data, batch_size=batch_size)


class StopsOnOneRank(Model):
    """Rank 1 alone sets trainer.should_stop in the middle of epoch 0 (a local decision)."""

    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and self.current_epoch == 0 and batch_idx == 2:
            self.trainer.should_stop = True
        return super().training_step(batch, batch_idx)


class RankScore(Model):
    """Logs a score without sync_dist that only improves on rank 0: EarlyStopping decides differently per rank."""

    def on_train_epoch_end(self):
        score = -float(self.current_epoch) if self.global_rank == 0 else 0.0
        self.log("score", score, rank_zero_only=False)

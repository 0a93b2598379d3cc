"""A module that 'runs out of memory' above a batch size, as CUDA reports it: the batch-size finder's tests
run on the CPU."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

import fulmen

OOM_MESSAGE = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.10 GiB total capacity)"


def dataset(n: int = 1000) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(n, 8, generator=g), torch.randn(n, 1, generator=g))


class OOMModel(fulmen.LightningModule):
    def __init__(
        self, fits_up_to: int = 48, batch_size: int = 2, samples: int = 1000, in_hparams: bool = False
    ):
        super().__init__()
        if in_hparams:
            self.save_hyperparameters("batch_size")
        else:
            self.batch_size = batch_size
        self.fits_up_to = fits_up_to
        self.samples = samples
        self.net = torch.nn.Linear(8, 1)
        self.seen: list[int] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(len(x))
        if len(x) > self.fits_up_to:
            raise RuntimeError(OOM_MESSAGE)
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        if len(x) > self.fits_up_to:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory.")
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def _size(self) -> int:
        return self.hparams["batch_size"] if "batch_size" in self.hparams else getattr(self, "batch_size", 8)

    def train_dataloader(self):
        return DataLoader(dataset(self.samples), batch_size=self._size(), shuffle=True)

    def val_dataloader(self):
        return DataLoader(dataset(64), batch_size=self._size())

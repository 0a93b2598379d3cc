"""The modules and data of the FSDP / model-parallel tests, shared by the torchrun script and the single-process
references in the tests."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

import fulmen
from tests.strategies.ddp_model import GAN, gan_loader  # noqa: F401  (re-exported for the script)


class Wide(fulmen.LightningModule):
    """A two-layer MLP whose every dimension splits evenly over 2 and 4 processes (so that each rank's shard
    is exactly 1/world_size of every tensor); records the indices of the samples it trains on."""

    def __init__(self, hidden: int = 64):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(8, hidden), nn.Tanh(), nn.Linear(hidden, 4))
        self.seen: list[int] = []

    def training_step(self, batch, batch_idx):
        x, y, index = batch
        self.seen.extend(int(i) for i in index)
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss, on_step=True, on_epoch=True, sync_dist=True)
        return loss

    def forward(self, x):
        return self.net(x)

    def validation_step(self, batch, batch_idx):
        x, y, _ = batch
        self.log("val_loss", nn.functional.cross_entropy(self(x), y), sync_dist=True)

    def predict_step(self, batch, batch_idx):
        return self(batch[0]).argmax(-1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.9)


class TensorParallelWide(Wide):
    """Tensor parallelism on the tensor-parallel dimension (first layer split by columns, second by rows),
    then FSDP over the data-parallel dimension, as in Lightning's 2-D parallelism guide."""

    def configure_model(self):
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = self.device_mesh
        parallelize_module(self.net, mesh["tensor_parallel"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(self.net, mesh=mesh["data_parallel"])


class Indexed(Dataset):
    """64 samples ``(x, y, index)``: a run's ``seen`` lists which samples it trained on."""

    def __init__(self, size: int = 64):
        g = torch.Generator().manual_seed(5)
        self.x = torch.randn(size, 8, generator=g)
        self.y = torch.randint(0, 4, (size,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


def indexed_loader(batch_size: int, shuffle: bool = True) -> DataLoader:
    return DataLoader(Indexed(), batch_size=batch_size, shuffle=shuffle)

"""Small, deterministic modules and data for tests and examples."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, IterableDataset

from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule


class RandomDataset(Dataset):  # type: ignore[type-arg]
    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class RandomIterableDataset(IterableDataset):  # type: ignore[type-arg]
    def __init__(self, size: int, count: int) -> None:
        self.count = count
        self.size = size

    def __iter__(self) -> Any:
        for _ in range(self.count):
            yield torch.randn(self.size)


class BoringModel(LightningModule):
    """A linear layer trained to push its outputs towards zero; every step is implemented."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(32, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.layer(x)

    def loss(self, preds: Tensor, labels: Tensor | None = None) -> Tensor:
        if labels is None:
            labels = torch.ones_like(preds)
        return torch.nn.functional.mse_loss(preds, labels)

    def step(self, batch: Any) -> Tensor:
        return self.loss(self(batch))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return {"loss": self.step(batch)}

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        return {"x": self.step(batch)}

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        return {"y": self.step(batch)}

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
        return [optimizer], [scheduler]

    def train_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(RandomDataset(32, 64))

    def val_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(RandomDataset(32, 64))

    def test_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(RandomDataset(32, 64))

    def predict_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(RandomDataset(32, 64))


class BoringDataModule(LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.random_full = RandomDataset(32, 64 * 4)

    def setup(self, stage: str) -> None:
        """The split(s) of ``stage`` only: fit also sets up validation (another stage's loader is then absent)."""
        data = self.random_full
        if stage == "fit":
            self.random_train = torch.utils.data.Subset(data, range(64))
        if stage in ("fit", "validate"):
            self.random_val = torch.utils.data.Subset(data, range(64, 128))
        if stage == "test":
            self.random_test = torch.utils.data.Subset(data, range(128, 192))
        if stage == "predict":
            self.random_predict = torch.utils.data.Subset(data, range(192, 256))

    def train_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(self.random_predict)

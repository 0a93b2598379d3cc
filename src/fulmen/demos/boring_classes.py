"""Small, deterministic modules and data for tests and examples."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, IterableDataset

from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.core.optimizer import LightningOptimizer as LightningOptimizer
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection


class RandomDataset(Dataset):
    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> Tensor:
        return self.data[index]

    def __len__(self) -> int:
        return self.len


class RandomDictDataset(Dataset):
    """``length`` items ``{"a": x, "b": x + 2}``, ``x`` a random vector of ``size``: a batch that is a dict."""

    def __init__(self, size: int, length: int) -> None:
        self.len = length
        self.data = torch.randn(length, size)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        a = self.data[index]
        return {"a": a, "b": a + 2}

    def __len__(self) -> int:
        return self.len


class RandomIterableDataset(IterableDataset):
    def __init__(self, size: int, count: int) -> None:
        self.count = count
        self.size = size

    def __iter__(self) -> Any:
        for _ in range(self.count):
            yield torch.randn(self.size)


class RandomIterableDatasetWithLen(RandomIterableDataset):
    """A :class:`RandomIterableDataset` that also tells its length (``count``)."""

    def __len__(self) -> int:
        return self.count


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

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def val_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def test_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(RandomDataset(32, 64))


class _RandomSplits(LightningDataModule):
    """A loader (batch size 1) over each of ``random_train`` / ``_val`` / ``_test`` / ``_predict``, which
    ``setup`` makes."""

    random_train: Any
    random_val: Any
    random_test: Any
    random_predict: Any

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.random_train)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.random_val)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.random_test)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.random_predict)


class BoringDataModule(_RandomSplits):
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


class BoringDataModuleNoLen(_RandomSplits):
    """Like :class:`BoringDataModule` with iterable datasets of no length (32 features): 512 training, 128
    validation, 256 test and 64 predict samples, each stage's made by its ``setup`` (fit also makes validation's)."""

    def setup(self, stage: str) -> None:
        if stage == "fit":
            self.random_train = RandomIterableDataset(32, 512)
        if stage in ("fit", "validate"):
            self.random_val = RandomIterableDataset(32, 128)
        if stage == "test":
            self.random_test = RandomIterableDataset(32, 256)
        if stage == "predict":
            self.random_predict = RandomIterableDataset(32, 64)



class IterableBoringDataModule(LightningDataModule):
    """Two loaders per stage, one over a sized dataset and one over an iterable one of the same length (4
    features): 16 training, 32 validation, 64 test and 128 predict samples each."""

    _LENGTHS = {"train": 16, "val": 32, "test": 64, "predict": 128}

    def setup(self, stage: str) -> None:
        splits = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",), "predict": ("predict",)}
        for split in splits.get(stage, ()):
            length = self._LENGTHS[split]
            setattr(self, f"{split}_datasets", [RandomDataset(4, length), RandomIterableDataset(4, length)])

    def _loaders(self, split: str) -> list[DataLoader]:
        return [DataLoader(dataset) for dataset in getattr(self, f"{split}_datasets")]

    def train_dataloader(self) -> list[DataLoader]:
        return self._loaders("train")

    def val_dataloader(self) -> list[DataLoader]:
        return self._loaders("val")

    def test_dataloader(self) -> list[DataLoader]:
        return self._loaders("test")

    def predict_dataloader(self) -> list[DataLoader]:
        return self._loaders("predict")


class ManualOptimBoringModel(BoringModel):
    """:class:`BoringModel` with manual optimization: each step zeroes the gradients, runs
    ``manual_backward`` and steps the optimizer itself."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        optimizer = self.optimizers()
        loss = self.step(batch)
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return loss


class DemoModel(LightningModule):
    """A linear layer (32 -> ``out_dim``) with a ReLU, trained to push the sum of its outputs down with Adam
    at ``learning_rate``; its batches are plain tensors of 32 features."""

    def __init__(self, out_dim: int = 10, learning_rate: float = 0.02) -> None:
        super().__init__()
        self.l1 = nn.Linear(32, out_dim)
        self.learning_rate = learning_rate

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.l1(x.view(x.size(0), -1)))

    def training_step(self, batch: Any, batch_nb: int) -> Any:
        return self(batch).sum()

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


class Net(nn.Module):
    """The classic MNIST convolutional classifier: (N, 1, 28, 28) images to (N, 10) log-probabilities."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.relu(self.conv2(torch.relu(self.conv1(x))))
        x = torch.flatten(self.dropout1(nn.functional.max_pool2d(x, 2)), 1)
        x = self.dropout2(torch.relu(self.fc1(x)))
        return torch.log_softmax(self.fc2(x), dim=1)

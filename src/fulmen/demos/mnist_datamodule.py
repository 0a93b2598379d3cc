"""MNIST for examples: the ``MNIST`` dataset and ``MNISTDataModule`` (the names examples import from
``lightning.pytorch.demos.mnist_datamodule``), without torchvision.

The data are the four IDX files of the MNIST distribution (``train-images-idx3-ubyte`` ... , gzipped or not)
in ``<root>/MNIST/raw``; ``download=True`` fetches missing ones from ``MNIST.mirror`` first. Without network
access, place the files there yourself.
"""

from __future__ import annotations

import gzip
import os
import urllib.request
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, random_split

from fulmen.core.datamodule import LightningDataModule

_FILES = {
    True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


def _read_idx(path: Path) -> Tensor:
    """An IDX file (unsigned bytes): its dimensions from the header, then the data."""
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise ValueError(f"{path} is not an IDX file of unsigned bytes.")
    ndim = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8).reshape(shape)


class MNIST(Dataset):  # type: ignore[type-arg]
    """(image, label): a float image of shape (1, 28, 28), normalized by ``normalize=(mean, std)``."""

    mirror = "https://ossci-datasets.s3.amazonaws.com/mnist/"

    def __init__(
        self, root: str | Path, train: bool = True, normalize: tuple[float, float] = (0.1307, 0.3081),
        download: bool = True,
    ) -> None:  # fmt: skip
        self.raw = Path(root) / "MNIST" / "raw"
        self.train = train
        self.normalize = normalize
        images, labels = (self._file(name, download) for name in _FILES[train])
        self.data = _read_idx(images)
        self.targets = _read_idx(labels).long()

    def _file(self, name: str, download: bool) -> Path:
        for candidate in (self.raw / name, self.raw / f"{name}.gz"):
            if candidate.exists():
                return candidate
        if not download:
            raise FileNotFoundError(f"MNIST: {self.raw / name}(.gz) does not exist; pass download=True or place it.")
        target = self.raw / f"{name}.gz"
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".part")
        try:
            urllib.request.urlretrieve(self.mirror + f"{name}.gz", partial)
        except OSError as err:
            raise RuntimeError(
                f"MNIST could not download {self.mirror}{name}.gz ({err}). Without network access, put the IDX "
                f"files in {self.raw} (download=False)."
            ) from err
        os.replace(partial, target)  # never a half-written file
        return target

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        image = self.data[index].float().unsqueeze(0) / 255.0
        mean, std = self.normalize
        return (image - mean) / std, int(self.targets[index])


class MNISTDataModule(LightningDataModule):
    """MNIST's training set split into train / validation (``val_split`` samples, by ``seed``), and its test
    set."""

    def __init__(
        self, data_dir: str = "data", val_split: int = 5000, num_workers: int = 0,
        normalize: tuple[float, float] = (0.1307, 0.3081), batch_size: int = 32, seed: int = 42,
    ) -> None:  # fmt: skip
        super().__init__()
        self.data_dir = data_dir
        self.val_split = val_split
        self.num_workers = num_workers
        self.normalize = normalize
        self.batch_size = batch_size
        self.seed = seed

    def prepare_data(self) -> None:
        for train in (True, False):  # downloads once, on one process
            MNIST(self.data_dir, train=train, normalize=self.normalize)

    def setup(self, stage: str) -> None:
        full = MNIST(self.data_dir, train=True, normalize=self.normalize, download=False)
        lengths = [len(full) - self.val_split, self.val_split]
        self.dataset_train, self.dataset_val = random_split(
            full, lengths, generator=torch.Generator().manual_seed(self.seed)
        )
        self.dataset_test = MNIST(self.data_dir, train=False, normalize=self.normalize, download=False)

    def _loader(self, dataset: Any, shuffle: bool = False) -> DataLoader:  # type: ignore[type-arg]
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return self._loader(self.dataset_train, shuffle=True)

    def val_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return self._loader(self.dataset_val)

    def test_dataloader(self) -> DataLoader:  # type: ignore[type-arg]
        return self._loader(self.dataset_test)


__all__ = ["MNIST", "MNISTDataModule"]

"""MNIST for examples: the ``MNIST`` dataset and ``MNISTDataModule`` (the names examples import from
``lightning.pytorch.demos.mnist_datamodule``).

``MNIST(...)`` is torchvision's ``MNIST`` when torchvision is installed, else fulmen's own reader, which needs
no torchvision. That one reads the four IDX files of the MNIST distribution (``train-images-idx3-ubyte`` ...,
gzipped or not) in ``<root>/MNIST/raw`` (torchvision's layout), or the ``training.pt`` / ``test.pt`` pairs of
tensors in ``<root>/MNIST/complete`` (where Lightning's own reader caches them); ``download=True`` fetches the
IDX files from ``mirror`` when neither is there. Without network access, place the files there yourself.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, random_split

from fulmen.core.datamodule import LightningDataModule
from fulmen.utilities.imports import _TORCHVISION_AVAILABLE as _TORCHVISION_AVAILABLE

_FILES = {
    True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
_CACHED = {True: "training.pt", False: "test.pt"}  # (images, labels) tensors, where Lightning's reader keeps them
_DATASETS_PATH = "./data"


def _read_idx(path: Path) -> Tensor:
    """An IDX file (unsigned bytes): its dimensions from the header, then the data."""
    data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    if data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise ValueError(f"{path} is not an IDX file of unsigned bytes.")
    ndim = data[3]
    shape = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8).reshape(shape)


class _MNIST(Dataset):
    """MNIST without torchvision: ``(image, label)`` with a float image of shape (1, 28, 28) scaled to [0, 1] and
    then normalized by ``normalize=(mean, std)`` (``None``: scaled only)."""

    mirror = "https://ossci-datasets.s3.amazonaws.com/mnist/"

    def __init__(
        self, root: str, train: bool = True, normalize: tuple[float, float] | None = (0.1307, 0.3081),
        download: bool = True, **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__()
        unknown = sorted(set(kwargs) - {"transform", "target_transform"})
        if unknown:
            raise TypeError(
                f"MNIST got {', '.join(f'{k}=' for k in unknown)} which fulmen's MNIST reader (used without "
                "torchvision) does not take. It takes root, train, normalize, download, transform and "
                "target_transform; install torchvision for torchvision's MNIST."
            )
        self.root = root
        self.train = train
        self.normalize = normalize
        self.transform: Callable[[Tensor], Any] | None = kwargs.get("transform")
        self.target_transform: Callable[[int], Any] | None = kwargs.get("target_transform")
        self.raw = Path(root) / "MNIST" / "raw"
        cached = Path(root) / "MNIST" / "complete" / _CACHED[train]
        if cached.is_file():
            self.data, targets = torch.load(cached, map_location="cpu", weights_only=True)
        else:
            images, labels = (self._file(name, download) for name in _FILES[train])
            self.data, targets = _read_idx(images), _read_idx(labels)
        self.targets = targets.long()

    def _file(self, name: str, download: bool) -> Path:
        for candidate in (self.raw / name, self.raw / f"{name}.gz"):
            if candidate.exists():
                return candidate
        if not download:
            raise RuntimeError(
                f"MNIST: dataset not found: neither {self.raw / name}(.gz) nor {Path(self.root) / 'MNIST' / 'complete'}"
                f"/{_CACHED[self.train]} exists. Pass download=True, or place the files there."
            )
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

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        image = self.data[index].unsqueeze(0)
        # bytes (IDX files, or a cache of them) are scaled; a cache may hold [0, 1] floats already
        image = image.float() / 255.0 if image.dtype == torch.uint8 else image.float()
        if self.normalize is not None:
            mean, std = self.normalize
            image = (image - mean) / std
        target: Any = int(self.targets[index])
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target


def _torchvision_available() -> bool:
    return importlib.util.find_spec("torchvision") is not None


def MNIST(*args: Any, **kwargs: Any) -> Dataset:
    """The MNIST dataset: torchvision's ``MNIST(*args, **kwargs)`` when torchvision is installed, else fulmen's
    reader, ``(root, train=True, normalize=(0.1307, 0.3081), download=True)``."""
    if _torchvision_available():
        from torchvision.datasets import MNIST as TorchvisionMNIST

        return TorchvisionMNIST(*args, **kwargs)
    return _MNIST(*args, **kwargs)


class MNISTDataModule(LightningDataModule):
    """MNIST's training set split into training and validation (``val_split`` images, drawn by ``seed``), and
    its test set, in batches of ``batch_size`` (the last incomplete batch dropped).

    Images are scaled to [0, 1]; ``normalize=True`` maps them to [-1, 1].
    """

    name = "mnist"

    def __init__(
        self, data_dir: str = _DATASETS_PATH, val_split: int = 5000, num_workers: int = 16, normalize: bool = False,
        seed: int = 42, batch_size: int = 32,
    ) -> None:  # fmt: skip
        super().__init__()
        self.data_dir = data_dir
        self.val_split = val_split
        self.num_workers = num_workers
        self.normalize = normalize
        self.seed = seed
        self.batch_size = batch_size

    @property
    def num_classes(self) -> int:
        return 10

    @property
    def default_transforms(self) -> Callable[..., Any] | None:
        """torchvision's transforms for its MNIST images (``None`` without torchvision)."""
        if not _torchvision_available():
            return None
        from torchvision import transforms

        if self.normalize:
            return transforms.Compose([transforms.ToTensor(), transforms.Normalize(mean=(0.5,), std=(0.5,))])
        return transforms.ToTensor()

    def _dataset(self, train: bool) -> Dataset:
        if _torchvision_available():
            return MNIST(self.data_dir, train=train, download=False, transform=self.default_transforms)
        return _MNIST(self.data_dir, train=train, download=False, normalize=(0.5, 0.5) if self.normalize else None)

    def prepare_data(self) -> None:
        for train in (True, False):  # downloads once, on one process
            MNIST(self.data_dir, train=train, download=True)

    def setup(self, stage: str) -> None:
        full = self._dataset(train=True)
        lengths = [len(full) - self.val_split, self.val_split]  # type: ignore[arg-type]
        self.dataset_train, self.dataset_val = random_split(
            full, lengths, generator=torch.Generator().manual_seed(self.seed)
        )

    def _loader(self, dataset: Any, shuffle: bool = False) -> DataLoader:
        return DataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers,
                          drop_last=True, pin_memory=torch.cuda.is_available())  # fmt: skip

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.dataset_train, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.dataset_val)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._dataset(train=False))


__all__ = ["MNIST", "MNISTDataModule"]

"""``LightningDataModule``: what ``str()`` says, and what ``from_datasets`` passes to ``__init__``."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader

from fulmen import LightningDataModule
from fulmen.demos.boring_classes import BoringDataModule, RandomDataset, RandomIterableDataset


def test_str_lists_the_dataset_sizes_per_stage():
    dm = BoringDataModule()
    assert str(dm) == os.linesep.join(f"{{{t} dataloader: None}}" for t in ("Train", "Validation", "Test", "Predict"))
    dm.setup("fit")
    assert str(dm).splitlines()[:3] == ["{Train dataloader: size=64}", "{Validation dataloader: size=64}",
                                        "{Test dataloader: None}"]  # fmt: skip

    class Several(LightningDataModule):
        def train_dataloader(self):
            return [DataLoader(RandomDataset(32, 16)), DataLoader(RandomIterableDataset(32, 8))]

    assert str(Several()).splitlines()[0] == "{Train dataloader: 1. size=16 ; 2. size=NA}"


def test_from_datasets_passes_batch_size_and_num_workers_to_init_when_taken():
    class Known(LightningDataModule):
        def __init__(self, batch_size=1, num_workers=0):
            super().__init__()
            self.batch_size, self.num_workers = batch_size, num_workers

    class Other(LightningDataModule):
        def __init__(self, other, batch_size=1):
            super().__init__()
            self.other, self.batch_size = other, batch_size

    dm = Known.from_datasets(RandomDataset(32, 8), batch_size=4, num_workers=0)
    assert (dm.batch_size, dm.num_workers) == (4, 0) and dm.train_dataloader().batch_size == 4
    dm = Other.from_datasets(RandomDataset(32, 8), batch_size=4, other=5)
    assert (dm.other, dm.batch_size) == (5, 4)
    with pytest.raises(TypeError, match="other"):
        Other.from_datasets(RandomDataset(32, 8), batch_size=4)
    assert dm.train_dataloader().pin_memory == torch.cuda.is_available()

"""Lightning's data helpers: has_iterable_dataset, sized_len, extract_batch_size (its ambiguity warning and error),
has_len_all_ranks (zero-length loaders across processes) and suggested_max_num_workers."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

import fulmen
from fulmen.utilities import data, suggested_max_num_workers
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle


class Stream(IterableDataset):
    def __iter__(self):
        yield from range(4)


class SizedStream(Stream):
    def __len__(self):
        return 4


class NoLen:
    def __len__(self):
        raise NotImplementedError


@dataclass
class Batch:
    x: torch.Tensor
    label: str


BATCHES = [torch.zeros(3, 2), torch.tensor(1.0), [torch.zeros(5), torch.zeros(5, 2)], {"a": "text", "b": torch.zeros(7)},
           Batch(torch.zeros(6, 1), torch.zeros(6)), [[None, torch.zeros(2)]], ((torch.zeros(4),),)]  # fmt: skip
AMBIGUOUS = [[torch.zeros(3), torch.zeros(4)], {"x": torch.zeros(2), "names": ["a", "b"]},
             Batch(torch.zeros(6), "x")]  # fmt: skip
NO_SIZE = ["text", None, {"a": 1}, [], Batch(None, "x")]


@oracle.parity
def test_lengths_and_iterable_datasets():
    oracle.lightning()
    from lightning.pytorch.utilities import data as theirs

    for loader in (DataLoader(range(10), batch_size=3), DataLoader(Stream()), DataLoader(SizedStream()), NoLen(), [],
                   object(), Stream()):  # fmt: skip
        assert data.sized_len(loader) == theirs.sized_len(loader)
        assert data.has_iterable_dataset(loader) == theirs.has_iterable_dataset(loader)
    assert data.has_iterable_dataset(DataLoader(Stream())) and not data.has_iterable_dataset(Stream())


@oracle.parity
def test_extract_batch_size_is_lightnings():
    oracle.lightning()
    from lightning.pytorch.utilities.data import extract_batch_size
    from lightning.pytorch.utilities.exceptions import MisconfigurationException as TheirException

    for batch in BATCHES:
        assert data.extract_batch_size(batch) == extract_batch_size(batch), batch
    for batch in AMBIGUOUS:
        with pytest.warns(UserWarning, match="ambiguous collection. The batch size we found is"):
            ours = data.extract_batch_size(batch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert ours == extract_batch_size(batch)
    for batch in NO_SIZE:
        with pytest.raises(MisconfigurationException, match="could not infer the batch_size"):
            data.extract_batch_size(batch)
        with pytest.raises(TheirException):
            extract_batch_size(batch)


class _Spread:
    """A strategy seen from one process whose summed loader length is `total` (the other processes' included)."""

    def __init__(self, total: int):
        self.total, self.root_device = total, torch.device("cpu")

    def reduce(self, tensor, reduce_op="mean"):
        assert reduce_op == "sum"
        return torch.tensor(self.total)


@oracle.parity
def test_has_len_all_ranks_is_lightnings():
    lightning = oracle.lightning()
    from lightning.pytorch.utilities.data import has_len_all_ranks

    strategy = fulmen.Trainer(accelerator="cpu", devices=1, logger=False).strategy  # one process: the real one
    theirs_strategy = lightning.Trainer(accelerator="cpu", devices=1, logger=False).strategy
    assert data.has_len_all_ranks(DataLoader(range(4)), strategy)
    assert has_len_all_ranks(DataLoader(range(4)), theirs_strategy)
    assert not data.has_len_all_ranks(NoLen(), strategy) and not has_len_all_ranks(NoLen(), theirs_strategy)
    for function, one in ((data.has_len_all_ranks, strategy), (has_len_all_ranks, theirs_strategy)):
        with pytest.warns(UserWarning, match="Total length of `DataLoader` across ranks is zero"):
            assert function(DataLoader([]), one)
        with pytest.warns(UserWarning, match="`IterableDataset` has `__len__` defined"):
            assert function(DataLoader(SizedStream()), one)
        with pytest.raises(RuntimeError, match="`DataLoader` within local rank has zero length"):
            function(DataLoader([]), _Spread(total=5))  # this process has no batch, others have some
        with pytest.warns(UserWarning, match="local rank has zero length"):
            assert function(DataLoader([]), _Spread(total=5), allow_zero_length_dataloader_with_multiple_devices=True)


@oracle.parity
def test_suggested_max_num_workers(monkeypatch):
    oracle.lightning()
    from lightning.pytorch.utilities import suggested_max_num_workers as theirs

    for cpus in (1, 2, 8, 64):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, cpus=cpus: set(range(cpus)), raising=False)
        for local_world_size in (1, 2, 3, 8, 100):
            assert suggested_max_num_workers(local_world_size) == theirs(local_world_size)
        assert suggested_max_num_workers(2) == max(1, cpus // 2 - 1)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="`local_world_size` should be >= 1"):
            suggested_max_num_workers(bad)
        with pytest.raises(ValueError):
            theirs(bad)

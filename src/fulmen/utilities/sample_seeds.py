"""Random augmentation that depends on the sample, not on who loads it.

A dataset whose ``__getitem__`` draws random numbers (crops, flips, noise) draws them from the generators of
whichever process loads the sample: a DataLoader worker seeded from the main process's RNG, or the main
process itself. The draws for a sample then depend on how many workers there are, which worker got the
sample, and on everything each worker loaded before it: a run resumed mid-epoch, or run on another number of
workers or processes, augments the same sample differently.

With sample seeding, each sample is loaded with ``torch``'s CPU generator, ``random`` and ``numpy.random``
seeded from ``(seed, epoch, index)`` (``seed``: the one given to ``seed_everything``; ``index``: the sample's
index in the dataset), so the same sample in the same epoch gets the same augmentation in any run of that
seed, on any number of workers or processes. In the main process (``num_workers=0``) the generators are put
back after each batch, so the training's own random numbers (dropout, ...) are those of a run without it.

How it works: the loop iterates a twin of the training DataLoader whose batch sampler tags each batch of
indices with the epoch, and whose dataset is a thin wrapper that seeds before each sample. The DataLoader the
user gave (``trainer.train_dataloader``) is unchanged; the twin shares its sampler, so ``set_epoch`` and
sampler state apply to both.

The one rule for a dataset: draw random numbers from the global generators (``torch.rand*``, ``random.*``,
``numpy.random.*``, and transforms built on them, such as torchvision's), not from a generator object the
dataset created and keeps itself. A dataset that fetches whole batches (``__getitems__``) is seeded once per
batch, from the batch's first index: exact for a resumed run and for any number of workers, but not for
another number of processes (its batches hold other samples).
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset, get_worker_info

from fulmen.utilities.data import is_iterable_dataset
from fulmen.utilities.loader_rebuild import with_batch_sampler
from fulmen.utilities.seed import isolate_rng

_MASK = (1 << 64) - 1
_SAMPLES_ENV = "PL_SEED_SAMPLES"  # "0": seed_everything(..., samples=False)


def _mix(x: int) -> int:
    """A 64-bit hash step (splitmix64's finaliser): nearby inputs give unrelated seeds."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """The 64-bit seed the sample ``index`` is loaded with in ``epoch`` of a run seeded with ``seed``."""
    return _mix(_mix(_mix(seed) ^ epoch) ^ index)


def _seed_generators(seed: int) -> None:
    torch.default_generator.manual_seed(seed)  # the CPU generator only: a GPU's stream belongs to training
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:
        return
    np.random.seed(seed & 0xFFFFFFFF)


class EpochBatch(list[int]):
    """A batch of sample indices that knows its epoch (it crosses to worker processes with it)."""

    epoch: int

    def __init__(self, indices: Any, epoch: int) -> None:
        super().__init__(indices)
        self.epoch = epoch


class EpochTaggedBatchSampler:
    """Yields the wrapped batch sampler's batches as :class:`EpochBatch` es of the current epoch."""

    def __init__(self, inner: Any, epoch: Callable[[], int]) -> None:
        self.inner, self._epoch = inner, epoch
        self.sampler = getattr(inner, "sampler", None)

    def __len__(self) -> int:
        return len(self.inner)

    def __iter__(self) -> Iterator[EpochBatch]:
        epoch = self._epoch()
        for batch in self.inner:
            yield EpochBatch(batch, epoch)


class SampleSeededDataset(Dataset[Any]):
    """``dataset`` whose samples are each loaded with generators seeded from ``(seed, epoch, index)``."""

    def __init__(self, dataset: Any, seed: int) -> None:
        self.dataset, self.seed = dataset, seed
        self._batched = callable(getattr(dataset, "__getitems__", None))

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:  # a batch sampler always fetches through __getitems__
        return self.dataset[index]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        epoch = getattr(indices, "epoch", 0)
        # in the main process the training's own generators are put back afterwards; a worker's are its own
        with isolate_rng(include_cuda=False) if get_worker_info() is None else contextlib.nullcontext():
            if self._batched:
                _seed_generators(sample_seed(self.seed, epoch, indices[0] if indices else 0))
                return list(self.dataset.__getitems__(list(indices)))
            samples = []
            for index in indices:
                _seed_generators(sample_seed(self.seed, epoch, index))
                samples.append(self.dataset[index])
            return samples


def sample_seed_in_use() -> int | None:
    """The seed samples are loaded with: ``seed_everything``'s (exported), unless it was called with
    ``samples=False``; ``None`` when it did not run."""
    seed = os.environ.get("PL_GLOBAL_SEED")
    if seed is None or os.environ.get(_SAMPLES_ENV, "1") == "0":
        return None
    try:
        return int(seed)
    except ValueError:
        return None


def sample_seeded(loader: Any, epoch: Callable[[], int], seed: int | None) -> Any:
    """The twin of ``loader`` that loads each sample with its own seeds (from ``seed``, the epoch and the
    index), or ``loader`` itself where that does not apply: no seed, a DataLoader subclass or custom iterable,
    an iterable dataset, a ``TensorDataset`` (indexing draws nothing)."""
    if seed is None or type(loader) is not DataLoader or loader.batch_sampler is None:
        return loader
    dataset = loader.dataset
    if is_iterable_dataset(loader) or type(dataset) is TensorDataset or isinstance(dataset, SampleSeededDataset):
        return loader
    batches = EpochTaggedBatchSampler(loader.batch_sampler, epoch)
    return with_batch_sampler(loader, batches, dataset=SampleSeededDataset(dataset, seed))

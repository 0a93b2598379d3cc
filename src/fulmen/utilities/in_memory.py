"""Data sets that fit in memory: :func:`preload` materialises one as stacked tensors, and
:class:`InMemoryDataLoader` batches it by indexing, without worker processes or per-sample collation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from fulmen.utilities.data import has_len

if TYPE_CHECKING:
    pass




def preload(dataset: Any, device: torch.device | str | None = None, chunk_size: int = 1024) -> TensorDataset:
    """Materialise a map-style ``dataset`` once, as stacked tensors in RAM (or on ``device``).

    Samples are collated in chunks the way a ``DataLoader`` collates a batch, so a sample ``(x, y)`` gives
    a ``TensorDataset`` of all ``x`` and all ``y``. Pair it with :class:`InMemoryDataLoader`, which then
    slices whole batches instead of collating samples one by one every epoch.
    """
    if isinstance(dataset, TensorDataset):
        tensors: tuple[torch.Tensor, ...] = tuple(dataset.tensors)
    else:
        if isinstance(dataset, IterableDataset) or not has_len(dataset):
            raise TypeError(
                f"preload(dataset={type(dataset).__name__}): the dataset must be map-style (with __len__ and "
                "__getitem__); an IterableDataset has no fixed set of samples to hold in memory."
            )
        chunks = list(DataLoader(dataset, batch_size=chunk_size, shuffle=False))
        if not chunks:
            raise ValueError(f"preload(dataset={type(dataset).__name__}): the dataset is empty.")
        first = chunks[0]
        if isinstance(first, torch.Tensor):
            tensors = (torch.cat(chunks),)
        elif isinstance(first, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in first):
            tensors = tuple(torch.cat([chunk[i] for chunk in chunks]) for i in range(len(first)))
        else:
            raise TypeError(
                f"preload(dataset={type(dataset).__name__}): samples collate to a {type(first).__name__}; "
                "preload supports samples that are tensors/numbers or tuples of them, e.g. (x, y)."
            )
    if device is not None:
        tensors = tuple(t.to(device) for t in tensors)
    return TensorDataset(*tensors)


class EpochShuffle:
    """The order of one epoch: a permutation drawn from a generator seeded with ``seed + epoch``.

    The fit loop calls :meth:`set_epoch` at each epoch start (as for a ``DistributedSampler``), so an
    epoch's order depends only on the seed and the epoch: a resumed run sees the same batches.
    """

    def __init__(self, size: int, shuffle: bool, seed: int) -> None:
        self.size = size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def indices(self, device: torch.device) -> torch.Tensor | None:
        """This process's sample order, or None for "all samples in order" (batches are then views)."""
        rank, world = _rank_and_world()
        if not self.shuffle and world == 1:
            return None
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.size, generator=generator)
        else:
            order = torch.arange(self.size)
        if world > 1:  # as DistributedSampler: pad to a multiple of the world size, then every world-th
            per_rank = -(-self.size // world)
            order = torch.cat([order, order[: per_rank * world - self.size]])[rank::world]
        return order.to(device)


class InMemoryDataLoader:
    """Batches sliced from tensors held in memory: a fast stand-in for ``DataLoader(TensorDataset(...))``.

    A ``DataLoader`` fetches and collates every sample on its own (``batch_size`` indexing calls and a
    ``torch.stack`` per batch); this loader takes each batch with one slice (a view, without shuffling)
    or one gather per tensor. Batches are lists ``[x, y, ...]``, as ``DataLoader`` gives for a
    ``TensorDataset``. With ``shuffle=True`` the order comes from ``seed`` and the epoch (see
    :class:`EpochShuffle`); ``seed=None`` draws one from torch's global generator, so
    ``seed_everything`` makes it reproducible. Under ``torch.distributed`` each process takes its share,
    as a ``DistributedSampler`` would give it.
    """

    def __init__(
        self,
        dataset: TensorDataset | torch.Tensor | tuple[torch.Tensor, ...] | list[torch.Tensor],
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        seed: int | None = None,
    ) -> None:
        if isinstance(dataset, TensorDataset):
            tensors = tuple(dataset.tensors)
        elif isinstance(dataset, torch.Tensor):
            tensors = (dataset,)
        elif (
            isinstance(dataset, (tuple, list))
            and dataset
            and all(isinstance(t, torch.Tensor) for t in dataset)
        ):
            tensors = tuple(dataset)
        else:
            raise TypeError(
                f"InMemoryDataLoader(dataset={type(dataset).__name__}): pass a TensorDataset, a tensor or a "
                "tuple of tensors. For any other map-style dataset, load it once with "
                "fulmen.utilities.in_memory.preload(dataset)."
            )
        sizes = {t.size(0) for t in tensors}
        if len(sizes) != 1:
            raise ValueError(f"InMemoryDataLoader: the tensors' first dimensions differ: {sorted(sizes)}.")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"InMemoryDataLoader(batch_size={batch_size!r}): must be an int >= 1.")
        if seed is None:
            seed = int(torch.randint(0, 2**31 - 1, ()).item())
        self.dataset = TensorDataset(*tensors)
        self.tensors = tensors
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = EpochShuffle(sizes.pop(), shuffle, seed)

    def __len__(self) -> int:
        rank_size = -(-self.sampler.size // _rank_and_world()[1])
        return rank_size // self.batch_size if self.drop_last else -(-rank_size // self.batch_size)

    def __iter__(self) -> Iterator[list[torch.Tensor]]:
        order = self.sampler.indices(self.tensors[0].device)
        size = self.sampler.size if order is None else len(order)
        bs = self.batch_size
        for start in range(0, len(self) * bs, bs):
            stop = min(start + bs, size)
            if order is None:
                yield [t[start:stop] for t in self.tensors]
            else:
                index = order[start:stop]
                yield [t[index] for t in self.tensors]


def _rank_and_world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1

"""Distributed samplers that never repeat a sample, and :func:`prepare_for_backward` for DDP.

``torch.utils.data.DistributedSampler`` pads the data set so that every process gets the same number of
samples: with 10 samples and 4 processes two samples are seen twice, which skews predictions and metrics.
:class:`UnrepeatedDistributedSampler` gives each sample to exactly one process instead, the shares then
differing by at most one. Use it where processes need not step in lockstep (prediction, evaluation without
``sync_dist`` on every batch); for training the uneven shares would leave a process waiting in a collective.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sized
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset, DistributedSampler, Sampler

from fulmen.utilities.rank_zero import rank_zero_debug as rank_zero_debug
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info


def _tensors_in(obj: Any) -> list[torch.Tensor]:
    """The tensors in ``obj`` (nested lists, tuples and dict values)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for item in obj for t in _tensors_in(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in _tensors_in(item)]
    return []


def prepare_for_backward(model: DistributedDataParallel, output: Any) -> None:
    """Arm ``model``'s gradient reduction for a backward from ``output`` that runs after its forward returned
    (manual optimization, or a forward called outside DDP): without it the gradients would stay local.

    Under ``no_sync`` (or without grad) nothing is armed and the next forward skips the buffer broadcast. With
    ``find_unused_parameters`` the reducer walks the graph from the tensors of ``output`` to learn which
    parameters will get no gradient.
    """
    if not (torch.is_grad_enabled() and model.require_backward_grad_sync):
        model.require_forward_param_sync = False
        return
    model.require_forward_param_sync = True
    roots = _tensors_in(output) if model.find_unused_parameters and not model.static_graph else []
    reducer = model.reducer
    reducer._rebuild_buckets()  # the bucket order learnt in the first backward, applied before the next one
    reducer.prepare_for_backward(roots)


class UnrepeatedDistributedSampler(DistributedSampler):
    """A ``DistributedSampler`` (same arguments) that hands every sample to exactly one process: rank ``r``
    gets positions ``r, r + num_replicas, ...`` of the (optionally shuffled) order, so the shares differ by
    at most one sample and nothing is padded or dropped."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        dataset = args[0] if args else kwargs.get("dataset")
        if not isinstance(dataset, Sized):
            raise TypeError(
                f"UnrepeatedDistributedSampler needs a data set with a length (`__len__`); "
                f"{type(dataset).__name__} has none. Shard an iterable data set yourself."
            )
        super().__init__(*args, **kwargs)
        size = len(dataset)
        self.total_size = size
        self.num_samples = len(range(self.rank, size, self.num_replicas))
        if size and self.num_samples < 1:
            # a process without a single sample would never join DDP's first collective and hang the others
            raise ValueError(
                f"UnrepeatedDistributedSampler: {size} sample(s) leave rank {self.rank} of {self.num_replicas} "
                "with none; every process needs at least one. Use fewer processes or more data."
            )

    def __iter__(self) -> Iterator[int]:
        size = len(self.dataset)  # type: ignore[arg-type]
        if self.shuffle:
            generator = torch.Generator()
            generator.manual_seed(self.seed + self.epoch)
            order = torch.randperm(size, generator=generator).tolist()
        else:
            order = list(range(size))
        return iter(order[self.rank : size : self.num_replicas])


class _SamplerAsDataset(Dataset):
    """The indices a sampler yields, as a data set: item ``i`` is the sampler's ``i``-th index of the current
    pass (re-drawn by :meth:`reset`, e.g. a new shuffle per epoch)."""

    def __init__(self, sampler: Sampler[Any] | Iterable[Any]) -> None:
        if not isinstance(sampler, Sized):
            raise TypeError(
                f"The DataLoader's sampler ({type(sampler).__name__}) has no `__len__`, so it cannot be shared out "
                "between processes. Give it a length, or pass Trainer(use_distributed_sampler=False) and shard "
                "the data yourself."
            )
        if len(sampler) == float("inf"):
            raise TypeError(
                f"The DataLoader's sampler ({type(sampler).__name__}) is endless, so it cannot be shared out "
                "between processes. Give it a finite length, or pass Trainer(use_distributed_sampler=False)."
            )
        self._sampler = sampler
        self._drawn: list[Any] | None = None

    def __getitem__(self, index: int) -> Any:
        if self._drawn is None:
            self._drawn = list(self._sampler)
        return self._drawn[index]

    def __len__(self) -> int:
        return len(self._sampler)

    def reset(self) -> None:
        self._drawn = list(self._sampler)


class _SharesOutASampler:
    """A distributed sampler over the positions of another sampler's indices (``dataset`` is a
    ``_SamplerAsDataset``): each pass draws the wrapped sampler afresh and yields its indices at the positions
    this process gets."""

    dataset: Any

    def __iter__(self) -> Iterator[Any]:
        drawn = self.dataset
        assert isinstance(drawn, _SamplerAsDataset)
        drawn.reset()
        return (drawn[position] for position in super().__iter__())  # type: ignore[misc]


class UnrepeatedDistributedSamplerWrapper(_SharesOutASampler, UnrepeatedDistributedSampler):
    """Shares out what another ``sampler`` yields (a weighted or custom sampler) like
    :class:`UnrepeatedDistributedSampler`: each of its indices goes to exactly one process. The wrapped sampler
    is drawn afresh at every pass."""

    def __init__(self, sampler: Sampler[Any] | Iterable[Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(_SamplerAsDataset(sampler), *args, **kwargs)


class DistributedSamplerWrapper(_SharesOutASampler, DistributedSampler):
    """Shares out what another ``sampler`` yields (a weighted or custom sampler) as a ``DistributedSampler``
    shares out a data set: each process gets every ``num_replicas``-th of the sampler's indices, padded to equal
    shares. The wrapped sampler is drawn afresh at every pass; ``shuffle=True`` permutes its draws (by ``seed``
    and the epoch) before they are shared out; ``set_epoch`` reaches it too (Lightning Fabric's
    ``DistributedSamplerWrapper``)."""

    def __init__(self, sampler: Sampler[Any] | Iterable[Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(_SamplerAsDataset(sampler), *args, **kwargs)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        drawn = self.dataset
        assert isinstance(drawn, _SamplerAsDataset)
        set_epoch = getattr(drawn._sampler, "set_epoch", None)
        if callable(set_epoch):
            set_epoch(epoch)

"""The data order a run resumed on another number of processes keeps (see ``loops/resume.py``)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from fulmen.loops.resume import OrderKeepingSampler, data_layout, global_order, keep_order


def _dataset(n: int) -> TensorDataset:
    return TensorDataset(torch.arange(n))


def _interleaved(sampler_for_rank, replicas: int) -> list[int]:
    shares = []
    for rank in range(replicas):
        sampler = sampler_for_rank(rank)
        sampler.set_epoch(3)
        shares.append(list(sampler))
    return [i for position in zip(*shares) for i in position]


@pytest.mark.parametrize("n", [24, 10, 11])  # even, padded for 4 shares, padded for 2 and 4
@pytest.mark.parametrize(("written", "resumed"), [(2, 1), (4, 2), (2, 4), (4, 1)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_every_epoch_keeps_the_global_order_of_the_writing_run(n, written, resumed, drop_last):
    dataset = _dataset(n)
    expected = global_order(dataset, written, True, 5, drop_last, epoch=3)
    got = _interleaved(lambda r: OrderKeepingSampler(dataset, resumed, r, True, 5, drop_last, written), resumed)
    assert got[: len(expected)] == expected
    assert len(got) - len(expected) < resumed  # at most the padding that shares it out evenly
    per_rank = len(OrderKeepingSampler(dataset, resumed, 0, True, 5, drop_last, written))
    assert per_rank * resumed == len(got)


def test_the_writing_runs_order_is_its_distributed_samplers():
    dataset = _dataset(11)
    expected = _interleaved(lambda r: DistributedSampler(dataset, 2, r, shuffle=True, seed=5), 2)
    assert global_order(dataset, 2, True, 5, False, epoch=3) == expected


def test_a_plain_process_resuming_a_distributed_run_keeps_its_order():
    dataset = _dataset(11)
    written = DataLoader(dataset, batch_size=2, sampler=DistributedSampler(dataset, 2, 0, shuffle=True, seed=5))
    saved = data_layout(written)
    assert saved is not None
    plain = DataLoader(dataset, batch_size=4, shuffle=True)
    kept = keep_order(plain, saved)
    assert isinstance(kept.sampler, OrderKeepingSampler) and kept.batch_size == 4
    assert data_layout(kept)["order_replicas"] == 2  # a checkpoint of the resumed run keeps saying so
    assert keep_order(kept, data_layout(kept)) is kept
    assert keep_order(plain, None) is plain  # no checkpoint: its own order
    assert keep_order(DataLoader(_dataset(12), batch_size=4), saved).sampler.__class__ is not OrderKeepingSampler

"""fulmen.overrides.distributed: samplers that hand every sample to exactly one process, and
prepare_for_backward arming DDP's reduction for a backward run outside DDP's forward."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler, WeightedRandomSampler

from fulmen.overrides.distributed import (
    UnrepeatedDistributedSampler,
    UnrepeatedDistributedSamplerWrapper,
    prepare_for_backward,
)
from tests import gloo
from tests.parity import oracle


def _shares(make, replicas: int) -> list[list[int]]:
    return [list(make(rank)) for rank in range(replicas)]


@pytest.mark.parametrize(("size", "replicas"), [(10, 4), (7, 3), (8, 2), (5, 5), (1, 1), (0, 3)])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_sample_goes_to_exactly_one_process(size, replicas, shuffle):
    data = list(range(size))
    samplers = [UnrepeatedDistributedSampler(data, num_replicas=replicas, rank=r, shuffle=shuffle) for r in range(replicas)]
    shares = [list(s) for s in samplers]
    assert sorted(i for share in shares for i in share) == data  # each index once, nothing padded or dropped
    assert [len(s) for s in samplers] == [len(share) for share in shares]
    assert max(map(len, shares)) - min(map(len, shares)) <= (1 if size else 0)
    # torch's DistributedSampler pads the shares to equal length by repeating samples
    padded = [list(DistributedSampler(data, num_replicas=replicas, rank=r, shuffle=shuffle)) for r in range(replicas)]
    assert sum(map(len, padded)) >= size


def test_uneven_shares_and_the_epoch_shuffle():
    shares = _shares(lambda r: UnrepeatedDistributedSampler(list(range(10)), num_replicas=4, rank=r, shuffle=False), 4)
    assert shares == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    sampler = UnrepeatedDistributedSampler(list(range(50)), num_replicas=2, rank=0, shuffle=True, seed=3)
    first = list(sampler)
    assert list(sampler) == first  # deterministic within an epoch
    sampler.set_epoch(1)
    partner = UnrepeatedDistributedSampler(list(range(50)), num_replicas=2, rank=1, shuffle=True, seed=3)
    partner.set_epoch(1)
    assert list(sampler) != first  # a new order each epoch, still shared out without repeats
    assert sorted(list(sampler) + list(partner)) == list(range(50))
    other_seed = UnrepeatedDistributedSampler(list(range(50)), num_replicas=2, rank=0, shuffle=True, seed=4)
    assert list(other_seed) != first  # the seed counts, as in torch's DistributedSampler


def test_refusals():
    with pytest.raises(TypeError, match="needs a data set with a length"):
        UnrepeatedDistributedSampler(iter(range(3)), num_replicas=2, rank=0)
    with pytest.raises(ValueError, match="leave rank 3 of 4 with none"):
        UnrepeatedDistributedSampler(list(range(3)), num_replicas=4, rank=3)
    with pytest.raises(TypeError, match="has no `__len__`"):
        UnrepeatedDistributedSamplerWrapper(iter(range(3)), num_replicas=2, rank=0)


@oracle.parity
@pytest.mark.parametrize(("size", "replicas"), [(10, 4), (7, 3), (9, 1)])
def test_shares_as_lightning(size, replicas):
    oracle.lightning()
    from lightning.pytorch.overrides import distributed as theirs

    data = list(range(size))
    for shuffle in (False, True):  # seed 0, Lightning's default: both shuffles draw the same permutation
        for epoch in (0, 2):
            for rank in range(replicas):
                ours = UnrepeatedDistributedSampler(data, num_replicas=replicas, rank=rank, shuffle=shuffle)
                lightning = theirs.UnrepeatedDistributedSampler(data, num_replicas=replicas, rank=rank, shuffle=shuffle)
                ours.set_epoch(epoch)
                lightning.set_epoch(epoch)
                assert list(ours) == list(lightning) and len(ours) == len(lightning)


@oracle.parity
def test_the_wrapper_shares_out_what_another_sampler_draws():
    oracle.lightning()
    from lightning.pytorch.overrides import distributed as theirs

    weights = [0.1, 5.0, 0.1, 5.0, 0.1, 5.0, 0.1]
    shares = []
    for rank in range(3):
        base = WeightedRandomSampler(weights, num_samples=7, generator=torch.Generator().manual_seed(1))
        mirror = WeightedRandomSampler(weights, num_samples=7, generator=torch.Generator().manual_seed(1))
        ours = UnrepeatedDistributedSamplerWrapper(base, num_replicas=3, rank=rank, shuffle=False)
        lightning = theirs.UnrepeatedDistributedSamplerWrapper(mirror, num_replicas=3, rank=rank, shuffle=False)
        mine = list(ours)  # each pass draws from the wrapped sampler again: one pass each
        assert mine == list(lightning) and len(ours) == len(lightning)
        shares.append(mine)
    draw = list(WeightedRandomSampler(weights, num_samples=7, generator=torch.Generator().manual_seed(1)))
    # the ranks' shares interleave back into the wrapped sampler's own draw, each position once
    assert [shares[p % 3][p // 3] for p in range(7)] == draw
    # a new pass draws from the wrapped sampler again (a new weighted draw)
    wrapper = UnrepeatedDistributedSamplerWrapper(
        WeightedRandomSampler(weights, num_samples=7, generator=torch.Generator().manual_seed(1)), num_replicas=1, rank=0,
        shuffle=False,
    )
    assert list(wrapper) == draw and list(wrapper) != draw


@pytest.fixture
def one_process_group():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    gloo.destroy_process_group()


def _counting_ddp(**kwargs) -> tuple[DistributedDataParallel, list[int]]:
    calls: list[int] = []

    def hook(state, bucket):
        calls.append(bucket.index())
        future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    model = DistributedDataParallel(nn.Linear(3, 1), **kwargs)
    model.register_comm_hook(None, hook)
    return model, calls


@oracle.parity
def test_prepare_for_backward_arms_the_reduction(one_process_group):
    """The reducer only reduces (here: calls the comm hook) for a backward it was armed for: by DDP's forward,
    or by prepare_for_backward when the forward went around DDP; under no_sync it stays unarmed."""
    oracle.lightning()
    from lightning.pytorch.overrides.distributed import prepare_for_backward as theirs

    for prepare in (prepare_for_backward, theirs):
        model, calls = _counting_ddp()
        out = model.module(torch.ones(2, 3)).sum()
        out.backward()
        assert calls == []  # around DDP and not armed: no reduction
        out = model.module(torch.ones(2, 3)).sum()
        prepare(model, out)
        assert model.require_forward_param_sync
        out.backward()
        assert calls == [0]
        with model.no_sync():
            out = model.module(torch.ones(2, 3)).sum()
            prepare(model, out)
            out.backward()
        assert calls == [0] and not model.require_forward_param_sync


def test_prepare_for_backward_finds_unused_parameters(one_process_group):
    class TwoHeads(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used, self.unused = nn.Linear(3, 1), nn.Linear(3, 1)

        def forward(self, x):
            return {"out": [self.used(x)]}  # a nested output: the tensors are found inside

    model = DistributedDataParallel(TwoHeads(), find_unused_parameters=True)
    output = model.module(torch.ones(2, 3))
    prepare_for_backward(model, output)
    output["out"][0].sum().backward()  # finishes although `unused` gets no gradient
    assert model.module.used.weight.grad is not None and model.module.unused.weight.grad is None
    model(torch.ones(2, 3))["out"][0].sum().backward()  # the next iteration starts cleanly

"""isolate_rng puts torch's, numpy's, python's (and CUDA's) generators back after the block, as Lightning's does,
and also when the block raises."""

from __future__ import annotations

import random
import subprocess
import sys

import numpy as np
import pytest
import torch

from fulmen.utilities.seed import isolate_rng
from tests.parity import oracle


def _draw() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


@oracle.parity
def test_draws_after_the_block_are_those_without_it():
    oracle.lightning()
    from lightning.pytorch.utilities.seed import isolate_rng as lightning_isolate_rng

    results = []
    for isolate in (isolate_rng, lightning_isolate_rng):
        torch.manual_seed(7), np.random.seed(7), random.seed(7)
        with isolate():
            inside = _draw()
        results.append((inside, _draw()))
    torch.manual_seed(7), np.random.seed(7), random.seed(7)
    undisturbed = _draw()
    # the block and what follows it draw the same numbers, as if the block had not drawn
    assert results[0] == results[1] == (undisturbed, undisturbed)


def test_restored_when_the_block_raises():
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    with pytest.raises(KeyError), isolate_rng(include_cuda=False):
        _draw()
        raise KeyError("stop")
    after = _draw()
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    assert after == _draw()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_generators_are_isolated():
    torch.cuda.manual_seed_all(5)
    with isolate_rng():
        inside = torch.rand(4, device="cuda").tolist()
    assert torch.rand(4, device="cuda").tolist() == inside
    with isolate_rng(include_cuda=False):
        torch.rand(4, device="cuda")
    assert torch.rand(4, device="cuda").tolist() != inside  # CUDA's generator was left alone


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_include_cuda_false_does_not_initialise_cuda():
    code = ("import torch\nfrom fulmen.utilities.seed import isolate_rng\nwith isolate_rng(include_cuda=False):\n"
            "    torch.rand(1)\nassert not torch.cuda.is_initialized()\nwith isolate_rng():\n    pass\n"
            "assert torch.cuda.is_initialized()\n")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True)

"""accelerators.cuda: counting CUDA devices through one function (what test suites replace to stand in GPUs)."""

from __future__ import annotations

import torch

import fulmen
from fulmen.accelerators import cuda
from fulmen.strategies import DDPStrategy
from tests.parity import oracle


@oracle.parity
def test_num_cuda_devices_is_where_lightnings_is_and_counts_as_torch():
    theirs = oracle.lightning("lightning.pytorch.accelerators.cuda")
    assert cuda.num_cuda_devices() == theirs.num_cuda_devices() == torch.cuda.device_count()


def test_every_count_goes_through_num_cuda_devices(monkeypatch):
    """Replacing it (as Lightning's own test suite does with two GPUs) changes what the Trainer plans."""
    monkeypatch.setattr(cuda, "num_cuda_devices", lambda: 2)
    assert cuda.CUDAAccelerator.is_available() and cuda.CUDAAccelerator.auto_device_count() == 2
    trainer = fulmen.Trainer(accelerator="gpu", devices=-1, strategy="ddp", logger=False)
    assert isinstance(trainer.strategy, DDPStrategy) and trainer.device_ids == [0, 1]
    monkeypatch.setattr(cuda, "num_cuda_devices", lambda: 0)
    assert not cuda.CUDAAccelerator.is_available()

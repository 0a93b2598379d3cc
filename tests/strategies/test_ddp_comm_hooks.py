"""DDPStrategy's communication hooks (ddp_comm_hook / ddp_comm_state / ddp_comm_wrapper) and post-local SGD
(model_averaging_period) run for real: two processes on gloo, started by DDPStrategy(start_method="spawn")."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import (
    PostLocalSGDState,
    post_localSGD_hook,
)
from torch.utils.data import DataLoader, TensorDataset

import fulmen
from fulmen.strategies import DDPStrategy
from fulmen.utilities.exceptions import MisconfigurationException


class RecordingState:
    """A hook's state: where each rank writes down the buckets it reduced."""

    def __init__(self, directory: str) -> None:
        self.directory = directory


def summing_hook(state: RecordingState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """All-reduce by sum without averaging (so its effect on the weights shows), noting each call."""
    with open(os.path.join(state.directory, f"rank{dist.get_rank()}.calls"), "a") as record:
        record.write(f"{bucket.index()}\n")
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def recording_wrapper(hook):  # shaped as torch's fp16_compress_wrapper
    def wrapped(state, bucket):
        with open(os.path.join(state.directory, f"rank{dist.get_rank()}.wrapped"), "a") as record:
            record.write("x\n")
        return hook(state, bucket)

    return wrapped


class Linear(fulmen.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1, bias=False)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.layer(x).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader(rows: int) -> DataLoader:
    # each rank's share (rank r: rows r, r+2, ...) differs, so local updates differ between ranks
    x = torch.arange(rows * 4, dtype=torch.float32).reshape(rows, 4) / 10
    return DataLoader(TensorDataset(x), batch_size=1)


def _fit(tmp_path: Path, strategy: DDPStrategy, steps: int) -> Linear:
    model = Linear()
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=steps, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, _loader(2 * steps))
    return model


@pytest.fixture(autouse=True)
def _no_launcher_env(monkeypatch):
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _expected_weight(steps: int, scale: float) -> torch.Tensor:
    """SGD on sum(w·x): the gradient is x, the same whatever w, so each step moves w by lr·scale·(x0 + x1)/2
    (x0, x1: the two ranks' rows); ``scale`` 2 for a hook that sums instead of averaging."""
    torch.manual_seed(0)
    weight = nn.Linear(4, 1, bias=False).weight.detach().clone()
    x = torch.arange(2 * steps * 4, dtype=torch.float32).reshape(2 * steps, 4) / 10
    for step in range(steps):
        weight -= 0.1 * scale * (x[2 * step] + x[2 * step + 1]) / 2
    return weight


@pytest.mark.slow
def test_a_comm_hook_and_its_wrapper_reduce_the_gradients(tmp_path):
    state = RecordingState(str(tmp_path))
    strategy = DDPStrategy(start_method="spawn", ddp_comm_state=state, ddp_comm_hook=summing_hook,
                           ddp_comm_wrapper=recording_wrapper)  # fmt: skip
    model = _fit(tmp_path, strategy, steps=3)
    # the hook summed the two ranks' gradients: twice the averaged step, on both ranks (rank 0's weights here)
    torch.testing.assert_close(model.layer.weight, _expected_weight(3, scale=2.0))
    for rank in (0, 1):  # one bucket per backward, through the wrapper, on each rank
        assert (tmp_path / f"rank{rank}.calls").read_text().split() == ["0", "0", "0"]
        assert len((tmp_path / f"rank{rank}.wrapped").read_text().split()) == 3


@pytest.mark.slow
def test_torch_fp16_compression_hook_runs_on_gloo(tmp_path):
    model = _fit(tmp_path, DDPStrategy(start_method="spawn", ddp_comm_hook=default_hooks.fp16_compress_hook), steps=2)
    # the averaged gradients, rounded through float16 on the way
    torch.testing.assert_close(model.layer.weight, _expected_weight(2, scale=1.0), rtol=1e-3, atol=1e-3)
    assert not torch.equal(model.layer.weight, _expected_weight(2, scale=1.0))


class LocalSGDCheck(fulmen.Callback):
    """Writes each rank's weights after every step, to compare the ranks."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        path = os.path.join(self.directory, f"rank{trainer.global_rank}_step{trainer.global_step}.pt")
        torch.save(pl_module.layer.weight.detach().clone(), path)


@pytest.mark.slow
def test_post_local_sgd_averages_the_weights_every_period(tmp_path):
    # steps 1-2 all-reduce the gradients (the ranks stay equal); from step 3 the gradients stay local
    # (post_local_gradient_allreduce=False) and the averager, past its warm-up of 2 steps, brings the ranks'
    # weights together every 2nd step: after steps 3 and 5, while they drift apart after steps 4 and 6
    state = PostLocalSGDState(process_group=None, subgroup=None, start_localSGD_iter=2,
                              post_local_gradient_allreduce=False)  # fmt: skip
    strategy = DDPStrategy(start_method="spawn", ddp_comm_state=state, ddp_comm_hook=post_localSGD_hook,
                           model_averaging_period=2)  # fmt: skip
    model = Linear()
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=6, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             callbacks=[LocalSGDCheck(str(tmp_path))], default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, _loader(12))
    equal = []
    for step in range(1, 7):
        weights = [torch.load(tmp_path / f"rank{rank}_step{step}.pt") for rank in (0, 1)]
        equal.append(torch.equal(*weights))
    assert equal == [True, True, True, False, True, False]


def test_comm_arguments_are_checked_early():
    with pytest.raises(TypeError, match=r"ddp_comm_hook=3\) must be a callable"):
        DDPStrategy(ddp_comm_hook=3)
    with pytest.raises(ValueError, match=r"model_averaging_period=0\) must be a positive"):
        DDPStrategy(model_averaging_period=0)
    with pytest.raises(MisconfigurationException, match="start method"):
        DDPStrategy(start_method="thread")
    strategy = DDPStrategy(ddp_comm_state=PostLocalSGDState(None, None, 1), ddp_comm_hook=post_localSGD_hook)
    with pytest.raises(ValueError, match="pass model_averaging_period"):
        strategy._make_model_averager()

"""strategy='ddp_spawn' (and 'ddp_fork'): fit/validate start two processes with torch.multiprocessing; the
caller's trainer and module end as after a one-process run on the global batch."""

from __future__ import annotations

import os
import time

import pytest
import torch

import fulmen
from fulmen.strategies import DDPSpawnStrategy
from fulmen.utilities.exceptions import MisconfigurationException
from tests.strategies.ddp_model import Model, loader
from tests.strategies.ddp_script import KillRank


class ValModel(Model):
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y), sync_dist=True)


class Preparing(ValModel):
    """Records which processes ran ``prepare_data`` (slowly, as a download) and when each process's ``setup``
    began, in ``record_dir``."""

    def __init__(self, record_dir: str) -> None:
        super().__init__()
        self.record_dir = record_dir

    def _record(self, what: str) -> None:
        with open(os.path.join(self.record_dir, f"{what}-{os.getpid()}-{time.time_ns()}"), "w") as fh:
            fh.write(os.environ.get("LOCAL_RANK", "none"))

    def prepare_data(self):
        time.sleep(0.5)
        self._record("prepared")

    def setup(self, stage):
        self._record("setup")


class FailingOnRankOne(Model):
    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and batch_idx == 2:
            raise ValueError("a bug that only rank 1 hits")
        return super().training_step(batch, batch_idx)


def _trainer(tmp_path, strategy="ddp_spawn", devices=2, **kwargs) -> fulmen.Trainer:
    options = {"max_epochs": 2, "logger": False, "enable_progress_bar": False, "enable_model_summary": False,
               "default_root_dir": tmp_path, **kwargs}  # fmt: skip
    return fulmen.Trainer(accelerator="cpu", devices=devices, strategy=strategy, **options)


@pytest.fixture(autouse=True)
def _no_launcher_env(monkeypatch):
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _single_run(model, **kwargs) -> fulmen.Trainer:
    trainer = fulmen.Trainer(max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=False, **kwargs)  # fmt: skip
    trainer.fit(model, loader(batch_size=8), loader(batch_size=8))
    return trainer


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp_spawn", "ddp_fork"])
def test_spawned_fit_returns_the_trained_model_to_the_caller(tmp_path, strategy):
    records = tmp_path / "records"
    records.mkdir()
    model = Preparing(str(records))
    trainer = _trainer(tmp_path, strategy)
    assert isinstance(trainer.strategy, DDPSpawnStrategy) and trainer.world_size == 2
    trainer.fit(model, loader(batch_size=4), loader(batch_size=4))
    # prepare_data (a download) ran once, on local rank 0, and the other process waited for it before setup
    prepared = [(p.name.split("-"), p.read_text()) for p in records.glob("prepared-*")]
    setups = [(p.name.split("-"), p.read_text()) for p in records.glob("setup-*")]
    assert [rank for _, rank in prepared] == ["0"] and sorted(rank for _, rank in setups) == ["0", "1"]
    assert all(int(name[2]) > int(prepared[0][0][2]) for name, _ in setups)

    single = ValModel()
    reference = _single_run(single)
    for name, value in single.state_dict().items():  # rank 0's weights, loaded into the caller's module
        torch.testing.assert_close(model.state_dict()[name], value, rtol=0, atol=1e-6, msg=name)
    assert trainer.state.finished and trainer.state.fn == "fit"
    assert (
        (trainer.global_step, trainer.current_epoch)
        == (reference.global_step, reference.current_epoch)
        == (16, 2)
    )
    for key in ("loss_epoch", "val_loss"):  # sync_dist: the global means, as one process computes them
        assert float(trainer.callback_metrics[key]) == pytest.approx(
            float(reference.callback_metrics[key]), abs=1e-6
        )
    best = trainer.checkpoint_callback.best_model_path  # the worker's ModelCheckpoint state came back too
    assert best and os.path.isfile(best) and best.startswith(str(tmp_path))
    saved = torch.load(best, weights_only=True)
    assert saved["global_step"] == 16
    for name, value in model.state_dict().items():
        torch.testing.assert_close(saved["state_dict"][name], value, rtol=0, atol=0)

    # the same trainer validates again in two new processes; the result is rank 0's (synced) metrics
    results = trainer.validate(model, loader(batch_size=4))
    assert results[0]["val_loss"] == pytest.approx(float(reference.callback_metrics["val_loss"]), abs=1e-6)


@pytest.mark.slow
def test_a_failing_rank_is_named_and_ends_the_job(tmp_path):
    # the worker's error is named in the message (its traceback is the cause); bf16-mixed: the precision
    # object travels to the workers too (its weak records of optimizers are left behind)
    with pytest.raises(RuntimeError, match="rank 1 failed with ValueError: a bug that only rank 1 hits") as info:
        _trainer(tmp_path, max_epochs=1, precision="bf16-mixed").fit(FailingOnRankOne(), loader(batch_size=4))
    assert "a bug that only rank 1 hits" in str(info.value.__cause__)
    # a rank that dies without a word (SIGKILL, as when its machine fails) ends the job too
    with pytest.raises(RuntimeError, match="rank 1 was killed by SIGKILL"):
        _trainer(tmp_path, max_epochs=1, callbacks=[KillRank(rank=1, batch=3)]).fit(
            Model(), loader(batch_size=4)
        )


def test_spawn_strategy_checks(monkeypatch, tmp_path):
    with pytest.raises(MisconfigurationException, match="machine only"):
        _trainer(tmp_path, num_nodes=2)
    with pytest.raises(MisconfigurationException, match="start method"):
        DDPSpawnStrategy(start_method="thread")
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(MisconfigurationException, match="already started by torchrun"):
        _trainer(tmp_path)
    assert _trainer(tmp_path, strategy="ddp").strategy.strategy_name == "ddp"  # under a launcher: plain DDP

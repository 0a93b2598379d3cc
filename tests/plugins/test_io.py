"""CheckpointIO plugins: TorchCheckpointIO as the default, AsyncCheckpointIO's ordering, snapshots and errors."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch

from fulmen import Trainer
from fulmen.callbacks import ModelCheckpoint
from fulmen.checkpoint import files as checkpoint_io
from fulmen.demos.boring_classes import BoringModel
from fulmen.plugins import AsyncCheckpointIO, CheckpointIO, MixedPrecision, TorchCheckpointIO
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle


class Decreasing(BoringModel):
    def validation_step(self, batch, batch_idx):
        self.log("val_loss", 10.0 - self.current_epoch)


class Recording(TorchCheckpointIO):
    """The real writer, slowed down, noting when each operation starts and ends."""

    def __init__(self, delay: float = 0.05, fail_on: int | None = None) -> None:
        self.delay, self.fail_on, self.saves = delay, fail_on, 0
        self.events: list[tuple[str, str]] = []
        self.threads: set[str] = set()

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        self.threads.add(threading.current_thread().name)
        self.saves += 1
        time.sleep(self.delay)
        if self.saves == self.fail_on:
            raise OSError(28, "No space left on device")
        super().save_checkpoint(checkpoint, path, storage_options)
        self.events.append(("saved", os.path.basename(path)))

    def remove_checkpoint(self, path):
        self.events.append(("removed", os.path.basename(path)))
        super().remove_checkpoint(path)


def _trainer(tmp_path, io, epochs=3, **kwargs):
    cb = ModelCheckpoint(dirpath=tmp_path / "ck", monitor="val_loss", save_top_k=1, save_last=True)
    return Trainer(max_epochs=epochs, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0,
                   callbacks=[cb], plugins=[io] if io else None, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, **kwargs)  # fmt: skip


def test_plugins_flag_sets_the_strategy_checkpoint_io():
    io = AsyncCheckpointIO()
    assert Trainer(plugins=[io]).strategy.checkpoint_io is io
    assert isinstance(Trainer().strategy.checkpoint_io, TorchCheckpointIO)
    trainer = Trainer(plugins=[MixedPrecision("bf16-mixed", "cpu"), io])
    assert trainer.strategy.checkpoint_io is io and trainer.precision == "bf16-mixed"
    with pytest.raises(MisconfigurationException, match="two checkpoint io plugins"):
        Trainer(plugins=[io, TorchCheckpointIO()])
    with pytest.raises(MisconfigurationException, match="CheckpointIO"):
        Trainer(plugins=[object()])
    with pytest.raises(TypeError, match="storage_options"):
        TorchCheckpointIO().save_checkpoint({}, "x.ckpt", storage_options={"key": 1})


def test_async_writes_the_same_files_in_the_background_and_removes_only_after_saving(tmp_path):
    torch.manual_seed(0)
    _trainer(tmp_path / "sync", None).fit(sync_model := Decreasing())
    inner = Recording()
    io = AsyncCheckpointIO(inner)
    trainer = _trainer(tmp_path / "async", io)
    torch.manual_seed(0)
    trainer.fit(model := Decreasing())
    assert sorted(os.listdir(tmp_path / "async" / "ck")) == sorted(os.listdir(tmp_path / "sync" / "ck"))
    assert inner.threads == {t for t in inner.threads if t.startswith("fulmen-checkpoint")}  # not the main thread
    # each rotated-out file was removed only after the file replacing it had been written
    order = list(inner.events)
    for i, (kind, _name) in enumerate(order):
        if kind == "removed":
            assert any(k == "saved" for k, _ in order[:i]), order
    assert order.index(("saved", "epoch=1-step=4.ckpt")) < order.index(("removed", "epoch=0-step=2.ckpt"))
    written = checkpoint_io.load(tmp_path / "async" / "ck" / "last.ckpt")
    for name, tensor in model.state_dict().items():
        assert torch.equal(written["state_dict"][name], tensor)
    for a, b in zip(model.parameters(), sync_model.parameters()):
        assert torch.equal(a, b)


def test_async_snapshot_is_taken_before_training_goes_on(tmp_path):
    inner = Recording(delay=0.3)
    io = AsyncCheckpointIO(inner)
    weights = {"w": torch.ones(3)}
    io.save_checkpoint({"state_dict": weights}, tmp_path / "a.ckpt")
    weights["w"].add_(5)  # training changes the weights in place while the save runs
    io.teardown()
    assert torch.equal(checkpoint_io.load(tmp_path / "a.ckpt")["state_dict"]["w"], torch.ones(3))


def test_a_failed_async_save_surfaces_and_keeps_the_previous_checkpoint(tmp_path):
    inner = Recording(fail_on=3)  # the third save: epoch 1's top-k file
    trainer = _trainer(tmp_path, AsyncCheckpointIO(inner))
    with pytest.raises(RuntimeError, match="asynchronous checkpoint save failed: .*No space left"):
        trainer.fit(Decreasing())
    files = os.listdir(tmp_path / "ck")
    assert "epoch=0-step=2.ckpt" in files, "the file the failed save was to replace is kept"
    assert checkpoint_io.load(tmp_path / "ck" / "epoch=0-step=2.ckpt")["global_step"] == 2


def test_error_raised_by_the_next_save_and_resume_from_last_waits_for_pending_saves(tmp_path):
    io = AsyncCheckpointIO(Recording(fail_on=1, delay=0.0))
    io.save_checkpoint({"a": torch.ones(1)}, tmp_path / "x.ckpt")
    time.sleep(0.2)
    with pytest.raises(RuntimeError, match="No space left"):
        io.save_checkpoint({"a": torch.ones(1)}, tmp_path / "y.ckpt")
    io.teardown()

    io = AsyncCheckpointIO(Recording(delay=0.2))
    _trainer(tmp_path / "r", io, epochs=2).fit(Decreasing())
    trainer = _trainer(tmp_path / "r", AsyncCheckpointIO(Recording(delay=0.2)), epochs=3)
    trainer.fit(Decreasing(), ckpt_path="last")
    assert trainer.global_step == 6 and trainer.ckpt_path.endswith("last.ckpt")


def test_a_checkpoint_io_of_your_own(tmp_path):
    class InMemory(CheckpointIO):
        def __init__(self):
            self.files = {}

        def save_checkpoint(self, checkpoint, path, storage_options=None):
            self.files[str(path)] = checkpoint

        def load_checkpoint(self, path, map_location=None, weights_only=None):
            return self.files[str(path)]

        def remove_checkpoint(self, path):
            self.files.pop(str(path), None)

    io = InMemory()
    _trainer(tmp_path, io).fit(Decreasing())
    assert sorted(os.path.basename(p) for p in io.files) == ["epoch=2-step=6.ckpt", "last.ckpt"]
    assert not (tmp_path / "ck").exists() or not os.listdir(tmp_path / "ck")



@oracle.parity
def test_a_checkpoint_io_given_to_the_strategy_and_in_plugins_is_refused_as_in_lightning():
    lightning = oracle.lightning()
    from lightning.pytorch.plugins import TorchCheckpointIO as TheirIO
    from lightning.pytorch.strategies import SingleDeviceStrategy as TheirStrategy

    from fulmen.strategies import SingleDeviceStrategy

    cpu = torch.device("cpu")
    their_error = oracle.lightning("lightning.fabric.utilities.exceptions").MisconfigurationException
    with pytest.raises(their_error):
        lightning.Trainer(strategy=TheirStrategy(cpu, checkpoint_io=TheirIO()), plugins=[TheirIO()], logger=False)
    with pytest.raises(MisconfigurationException, match="given twice"):
        Trainer(strategy=SingleDeviceStrategy(cpu, checkpoint_io=TorchCheckpointIO()), plugins=[TorchCheckpointIO()],
                logger=False)  # fmt: skip
    strategy = SingleDeviceStrategy(cpu)
    assert isinstance(strategy.checkpoint_io, TorchCheckpointIO)  # reading the default does not choose it
    trainer = Trainer(strategy=strategy, plugins=[AsyncCheckpointIO()], logger=False)
    assert isinstance(trainer.strategy.checkpoint_io, AsyncCheckpointIO)

"""The checkpoint-I/O package laid out as Lightning's (``plugins.io.*_plugin``), the wrapper's choice of writer,
XLACheckpointIO's refusal, and Lightning Fabric's CheckpointIO objects taken wherever Lightning takes them."""

from __future__ import annotations

import importlib

import pytest
import torch

from fulmen import Trainer
from fulmen.demos.boring_classes import BoringModel
from fulmen.plugins.io import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO, XLACheckpointIO
from tests.parity import oracle


def _trainer(tmp_path, **kwargs):
    options = dict(max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0, logger=False,
                   enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    return Trainer(**{**options, **kwargs})


def test_each_name_from_its_module_and_from_the_package():
    modules = {"checkpoint_plugin": CheckpointIO, "torch_plugin": TorchCheckpointIO,
               "async_plugin": AsyncCheckpointIO, "xla_plugin": XLACheckpointIO}  # fmt: skip
    for module, cls in modules.items():
        assert getattr(importlib.import_module(f"fulmen.plugins.io.{module}"), cls.__name__) is cls
    import fulmen.plugins

    assert fulmen.plugins.XLACheckpointIO is XLACheckpointIO and fulmen.plugins.AsyncCheckpointIO is AsyncCheckpointIO
    assert issubclass(AsyncCheckpointIO, importlib.import_module("fulmen.plugins.io.wrapper")._WrappingCheckpointIO)


def test_the_wrapped_writer_is_the_users_or_replaceable_default():
    default = AsyncCheckpointIO()
    assert type(default.checkpoint_io) is TorchCheckpointIO  # usable on its own
    replacement = TorchCheckpointIO()
    default.checkpoint_io = replacement  # a strategy's own default takes the place of the implicit one ...
    assert default.checkpoint_io is replacement
    default.checkpoint_io = TorchCheckpointIO()  # ... once
    assert default.checkpoint_io is replacement
    mine = TorchCheckpointIO()
    chosen = AsyncCheckpointIO(mine)
    chosen.checkpoint_io = TorchCheckpointIO()
    assert chosen.checkpoint_io is mine  # the user's choice is never replaced
    nested = AsyncCheckpointIO(AsyncCheckpointIO())
    nested.checkpoint_io = replacement  # reaches the innermost default
    assert nested.checkpoint_io.checkpoint_io is replacement
    with pytest.raises(TypeError, match="cannot itself be a wrapper"):
        AsyncCheckpointIO().checkpoint_io = AsyncCheckpointIO()


@oracle.parity
def test_xla_checkpoint_io_needs_torch_xla_as_in_lightning():
    oracle.lightning()
    from lightning.pytorch.plugins import XLACheckpointIO as Theirs

    with pytest.raises(ModuleNotFoundError):
        Theirs()
    with pytest.raises(ModuleNotFoundError, match=r"pip install -U 'torch_xla>=1.13'.*CPUs and GPUs"):
        XLACheckpointIO("any", keyword="arguments")


@oracle.parity
def test_lightning_checkpoint_ios_are_checkpoint_ios():
    oracle.lightning()
    from lightning.fabric.plugins import TorchCheckpointIO as FabricTorchCheckpointIO
    from lightning.pytorch.plugins import AsyncCheckpointIO as LightningAsync

    assert isinstance(FabricTorchCheckpointIO(), CheckpointIO) and isinstance(LightningAsync(), CheckpointIO)
    # what only looks like one is not: a strategy saves, loads and removes checkpoints too
    assert not isinstance(Trainer().strategy, CheckpointIO)

    class Incomplete:  # the name without the interface
        __name__ = "CheckpointIO"

    assert not isinstance(Incomplete(), CheckpointIO)
    assert not issubclass(FabricTorchCheckpointIO, TorchCheckpointIO)  # fulmen's subclasses stay fulmen's


@oracle.parity
def test_a_fit_writes_and_resumes_through_a_fabric_checkpoint_io(tmp_path):
    """A library's CheckpointIO written for Lightning (subclassing Fabric's TorchCheckpointIO) in plugins=: every
    save of the fit and the load of ckpt_path go through it, as in Lightning."""
    oracle.lightning()
    from lightning.fabric.plugins import TorchCheckpointIO as FabricTorchCheckpointIO

    class Counting(FabricTorchCheckpointIO):
        def __init__(self) -> None:
            self.saved: list[str] = []
            self.loaded: list[str] = []

        def save_checkpoint(self, checkpoint, path, storage_options=None):
            self.saved.append(str(path))
            super().save_checkpoint(checkpoint, path, storage_options)

        def load_checkpoint(self, path, map_location=None, weights_only=None):
            self.loaded.append(str(path))
            return super().load_checkpoint(path, map_location=map_location, weights_only=False)

    io = Counting()
    trainer = _trainer(tmp_path, plugins=[io])
    assert trainer.strategy.checkpoint_io is io
    trainer.fit(BoringModel())
    assert len(io.saved) == 1 and io.saved[0].endswith(".ckpt")
    saved = torch.load(io.saved[0], weights_only=False)
    assert saved["global_step"] == 2 and "state_dict" in saved
    resumed = _trainer(tmp_path, plugins=[io], max_epochs=2)
    resumed.fit(BoringModel(), ckpt_path=io.saved[0])
    assert io.loaded == [io.saved[0]] and resumed.global_step == 4  # went on from step 2
    assert len(io.saved) == 2


@oracle.parity
def test_a_strategys_checkpoint_io_may_be_fabrics(tmp_path):
    oracle.lightning()
    from lightning.fabric.plugins import TorchCheckpointIO as FabricTorchCheckpointIO

    from fulmen.strategies import SingleDeviceStrategy

    class Counting(FabricTorchCheckpointIO):
        saves = 0

        def save_checkpoint(self, checkpoint, path, storage_options=None):
            type(self).saves += 1
            super().save_checkpoint(checkpoint, path, storage_options)

    io = Counting()
    trainer = _trainer(tmp_path, strategy=SingleDeviceStrategy("cpu", checkpoint_io=io), accelerator="cpu")
    trainer.fit(BoringModel())
    assert trainer.strategy.checkpoint_io is io and Counting.saves == 1
    assert len(list((tmp_path / "checkpoints").glob("*.ckpt"))) == 1

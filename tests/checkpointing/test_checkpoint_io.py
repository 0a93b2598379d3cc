"""Safe loading, atomic writes, hyperparameters as saved, safetensors export, load_from_checkpoint."""

from __future__ import annotations

import enum
import errno
import os
from pathlib import Path

import pytest
import torch

from fulmen import LightningDataModule, Trainer
from fulmen.checkpoint import files as checkpoint_io
from fulmen.demos.boring_classes import BoringModel


class Color(enum.Enum):
    RED = "red"


class HModel(BoringModel):
    def __init__(self, lr: float = 0.1, path: Path = Path("x/y"), color: Color = Color.RED, dims=(2, 3)):
        super().__init__()
        self.save_hyperparameters()


class DM(LightningDataModule):
    def __init__(self, batch_size: int = 4) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.seen = 0

    def state_dict(self):
        return {"seen": self.seen}

    def load_state_dict(self, state_dict):
        self.seen = state_dict["seen"]

    def train_dataloader(self):
        return BoringModel().train_dataloader()


def _fit(model, **kwargs) -> Trainer:
    trainer = Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, logger=False,
                      enable_progress_bar=False, enable_model_summary=False, **kwargs)  # fmt: skip
    trainer.fit(model)
    return trainer


class _Payload:
    """Unpickling this runs code: what a malicious checkpoint would carry."""

    def __reduce__(self):
        return (exec, ("open('PWNED', 'w').write('code from a checkpoint ran')",))


def test_malicious_checkpoint_is_refused_and_payload_never_runs(tmp_path):
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": BoringModel().state_dict(), "hyper_parameters": {"x": _Payload()}}, path)
    with pytest.raises(checkpoint_io.UnsafeCheckpointError) as info:
        checkpoint_io.load(path)
    message = str(info.value)
    assert str(path) in message and "weights_only=False" in message
    with pytest.raises(checkpoint_io.UnsafeCheckpointError):
        BoringModel.load_from_checkpoint(path)
    trainer = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(checkpoint_io.UnsafeCheckpointError):
        trainer.fit(BoringModel(), ckpt_path=path)
    assert not Path("PWNED").exists()
    # a trusted file can still be opened on purpose
    checkpoint_io.load(path, weights_only=False)
    assert Path("PWNED").exists()


def test_fulmen_checkpoints_load_with_weights_only_true(tmp_path):
    dm = DM()
    trainer = Trainer(max_epochs=1, limit_train_batches=2, logger=False, enable_progress_bar=False,
                      enable_model_summary=False)  # fmt: skip
    trainer.fit(HModel(), datamodule=dm)
    path = tmp_path / "plain.ckpt"
    trainer.save_checkpoint(path)
    # the hyperparameters as saved (Lightning's format): the path and the enum member themselves
    checkpoint = torch.load(path, weights_only=False)
    assert checkpoint["hyper_parameters"] == {"lr": 0.1, "path": Path("x/y"), "color": Color.RED, "dims": (2, 3)}
    assert checkpoint["hparams_name"] == "kwargs"
    assert checkpoint["datamodule_hyper_parameters"] == {"batch_size": 4}
    assert checkpoint["DM"] == {"seen": 0}
    for key in ("state_dict", "optimizer_states", "lr_schedulers", "epoch", "global_step", "loops", "callbacks",
                "pytorch-lightning_version"):  # fmt: skip
        assert key in checkpoint
    # the enum's class is the user's: the safe unpickler needs to be told it may build it; a path needs nothing
    with pytest.raises(checkpoint_io.UnsafeCheckpointError, match=r"test_checkpoint_io\.Color"):
        checkpoint_io.load(path)
    with torch.serialization.safe_globals([Color]):
        assert checkpoint_io.load(path)["hyper_parameters"]["path"] == Path("x/y")
    # everything else fulmen writes is tensors, containers and primitives: plain torch, no allow-list
    trainer.fit(BoringModel(), datamodule=dm)
    trainer.save_checkpoint(path)
    assert torch.load(path, weights_only=True)["datamodule_hyper_parameters"] == {"batch_size": 4}


def test_load_from_checkpoint_overrides_and_refuses_instances(tmp_path):
    model = HModel(lr=0.5)
    trainer = _fit(model)
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    loaded = HModel.load_from_checkpoint(path, weights_only=False, color=Color.RED, path=Path("a"))
    assert loaded.hparams.lr == 0.5 and loaded.hparams.path == Path("a")
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value)
    with pytest.raises(TypeError, match="class method"):
        model.load_from_checkpoint(path)


def test_datamodule_load_from_checkpoint(tmp_path):
    dm = DM(batch_size=7)
    dm.seen = 3
    trainer = Trainer(max_epochs=1, limit_train_batches=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False)  # fmt: skip
    trainer.fit(BoringModel(), datamodule=dm)
    path = tmp_path / "dm.ckpt"
    trainer.save_checkpoint(path)
    restored = DM.load_from_checkpoint(path)
    assert restored.hparams.batch_size == 7 and restored.seen == 3


def test_write_failure_names_the_path_and_keeps_the_previous_file(tmp_path, monkeypatch):
    model = BoringModel()
    trainer = _fit(model)
    out = tmp_path / "out"
    out.mkdir()
    path = out / "keep.ckpt"
    trainer.save_checkpoint(path)
    before = path.read_bytes()

    def disk_full(obj, f, *args, **kwargs):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_io.torch, "save", disk_full)
    with pytest.raises(checkpoint_io.CheckpointWriteError, match="No space left") as info:
        trainer.save_checkpoint(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == before
    assert [p.name for p in out.iterdir()] == ["keep.ckpt"], "no temporary file is left behind"
    monkeypatch.undo()
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(checkpoint_io.CheckpointWriteError, match="file/x.ckpt"):
        trainer.save_checkpoint(tmp_path / "file" / "x.ckpt")
    # training state is untouched: the trainer can still save and continue
    trainer.save_checkpoint(path)
    assert trainer.global_step == 2


def test_safetensors_export_and_load(tmp_path):
    pytest.importorskip("safetensors")
    model = HModel(lr=0.25)
    trainer = _fit(model)
    path = tmp_path / "weights.safetensors"
    trainer.save_checkpoint(path)
    from safetensors.torch import load_file

    tensors = load_file(os.fspath(path))
    assert set(tensors) == set(model.state_dict())
    loaded = HModel.load_from_checkpoint(path, path=Path("x/y"), color=Color.RED)
    assert loaded.hparams.lr == 0.25
    assert torch.equal(loaded.layer.weight, model.layer.weight)


def test_weights_only_checkpoint_cannot_resume(tmp_path):
    trainer = _fit(BoringModel())
    path = tmp_path / "w.ckpt"
    trainer.save_checkpoint(path, weights_only=True)
    assert "optimizer_states" not in torch.load(path, weights_only=True)
    with pytest.raises(KeyError, match="no optimizer states"):
        Trainer(max_epochs=2, logger=False, enable_progress_bar=False).fit(BoringModel(), ckpt_path=path)


def test_ckpt_path_errors():
    trainer = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(FileNotFoundError, match="missing.ckpt"):
        trainer.fit(BoringModel(), ckpt_path="missing.ckpt")
    with pytest.raises(ValueError, match="best"):
        trainer.fit(BoringModel(), ckpt_path="best")
    with pytest.warns(UserWarning, match="no last checkpoint"):
        trainer.fit(BoringModel(), ckpt_path="last")


def test_save_on_exception_writes_a_checkpoint_in_dirpath(tmp_path):
    from fulmen.callbacks import ModelCheckpoint

    class Boom(BoringModel):
        def training_step(self, batch, batch_idx):
            if self.global_step == 2:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    callback = ModelCheckpoint(dirpath=tmp_path / "ck", save_on_exception=True)
    trainer = Trainer(max_epochs=1, callbacks=[callback], logger=False, enable_progress_bar=False,
                      enable_model_summary=False)  # fmt: skip
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Boom())
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["epoch=0-step=2.ckpt"]  # Lightning's name
    assert checkpoint_io.load(tmp_path / "ck" / "epoch=0-step=2.ckpt")["global_step"] == 2


@pytest.mark.parametrize("when", ["sanity_check", "fast_dev_run", "already_saved"])
def test_save_on_exception_saves_nothing_new(tmp_path, when):
    """No checkpoint from a sanity check or fast_dev_run, nor a second one of a step already saved."""
    from fulmen.callbacks import ModelCheckpoint

    class Boom(BoringModel):
        def on_validation_start(self):
            if when == "sanity_check" and self.trainer.sanity_checking:
                raise RuntimeError("boom")

        def on_train_batch_start(self, batch, batch_idx):
            if when != "sanity_check" and self.global_step == 1:
                raise RuntimeError("boom")

    callback = ModelCheckpoint(dirpath=tmp_path, filename="ck", save_on_exception=True,
                               every_n_train_steps=1 if when == "already_saved" else None)  # fmt: skip
    trainer = Trainer(max_epochs=2, limit_train_batches=2, callbacks=[callback], logger=False,
                      fast_dev_run=2 if when == "fast_dev_run" else False, enable_progress_bar=False)  # fmt: skip
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Boom())
    expected = ["ck.ckpt"] if when == "already_saved" else []  # the step's own checkpoint, not overwritten
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == expected
    if expected:
        assert checkpoint_io.load(tmp_path / "ck.ckpt")["global_step"] == 1


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
@pytest.mark.parametrize("weights_only", [True, False])
def test_a_damaged_file_is_named_as_not_a_complete_checkpoint(tmp_path, damage, weights_only):
    good = tmp_path / "good.ckpt"
    checkpoint_io.save({"state_dict": {"w": torch.randn(64, 64)}, "epoch": 3}, good)
    data = good.read_bytes()
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"not a checkpoint" * 9}[damage])
    with pytest.raises(checkpoint_io.CorruptCheckpointError, match=r"bad\.ckpt' is not a complete checkpoint"):
        checkpoint_io.load(bad, weights_only=weights_only)
    with pytest.raises(checkpoint_io.CorruptCheckpointError, match="bad.ckpt"):
        BoringModel.load_from_checkpoint(bad)
    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)  # fmt: skip
    with pytest.raises(checkpoint_io.CorruptCheckpointError, match="bad.ckpt"):
        trainer.fit(BoringModel(), ckpt_path=bad)
    assert checkpoint_io.load(good)["epoch"] == 3  # a whole file still loads


def test_resuming_past_max_epochs_is_an_error(tmp_path):
    from fulmen import Trainer
    from fulmen.demos.boring_classes import BoringModel
    from fulmen.utilities.exceptions import MisconfigurationException

    flags = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, limit_train_batches=2,
                 limit_val_batches=0, default_root_dir=tmp_path)  # fmt: skip
    trainer = Trainer(max_epochs=3, **flags)
    trainer.fit(BoringModel())
    path = tmp_path / "done.ckpt"
    trainer.save_checkpoint(path)
    with pytest.raises(MisconfigurationException, match=r"current_epoch=3, but you have set Trainer\(max_epochs=1\)"):
        Trainer(max_epochs=1, **flags).fit(BoringModel(), ckpt_path=path)
    Trainer(max_epochs=3, **flags).fit(BoringModel(), ckpt_path=path)  # the same limit: nothing left, no error


def test_a_missing_hparams_file_warns_and_the_checkpoints_values_are_used(tmp_path):
    from fulmen.demos.boring_classes import BoringModel

    class Model(BoringModel):
        def __init__(self, width=32):
            super().__init__()
            self.save_hyperparameters()

    torch.save({"state_dict": Model().state_dict(), "hyper_parameters": {"width": 7}}, tmp_path / "m.ckpt")
    with pytest.warns(UserWarning, match="Missing Tags: .*nope.yaml"):
        model = Model.load_from_checkpoint(tmp_path / "m.ckpt", hparams_file=tmp_path / "nope.yaml")
    assert model.hparams.width == 7

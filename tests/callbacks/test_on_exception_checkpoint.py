"""OnExceptionCheckpoint: a checkpoint when fit raises, resumed from by the next fit, removed when one ends."""

from __future__ import annotations

import os

import pytest

from fulmen import Trainer
from fulmen.callbacks import ModelCheckpoint, OnExceptionCheckpoint
from fulmen.checkpoint import files as checkpoint_io
from fulmen.demos.boring_classes import BoringModel


class FailsAt(BoringModel):
    def __init__(self, step: int | None = None) -> None:
        super().__init__()
        self.fail_at = step

    def training_step(self, batch, batch_idx):
        if self.global_step == self.fail_at:
            raise RuntimeError("boom")
        return super().training_step(batch, batch_idx)


def _trainer(cb, **kwargs):
    return Trainer(max_epochs=kwargs.pop("max_epochs", 2), limit_train_batches=3, limit_val_batches=1,
                   callbacks=[cb], logger=False, enable_progress_bar=False, enable_model_summary=False, **kwargs)  # fmt: skip


def test_saves_on_exception_then_the_next_fit_resumes_and_removes_it(tmp_path):
    cb = OnExceptionCheckpoint(tmp_path / "oe")
    assert cb.ckpt_path == str(tmp_path / "oe" / "on_exception.ckpt")
    trainer = _trainer(cb, default_root_dir=tmp_path)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(FailsAt(4))
    assert checkpoint_io.load(cb.ckpt_path)["global_step"] == 4
    assert trainer.checkpoint_callbacks == [cb]  # it is a Checkpoint: no default ModelCheckpoint was added
    assert not os.path.exists(tmp_path / "checkpoints")

    trainer = _trainer(cb, default_root_dir=tmp_path)
    trainer.fit(FailsAt(None))
    assert trainer.ckpt_path == cb.ckpt_path and trainer.global_step == 6
    assert not os.path.exists(cb.ckpt_path), "a finished fit removes the file, so it cannot restart a done run"


def test_an_explicit_ckpt_path_wins_and_a_finished_fit_leaves_no_file(tmp_path):
    cb = OnExceptionCheckpoint(tmp_path, filename="crash")
    saver = ModelCheckpoint(dirpath=tmp_path / "ck")
    _trainer(cb, max_epochs=1).fit(BoringModel())
    assert os.listdir(tmp_path) == []
    trainer = Trainer(max_epochs=1, limit_train_batches=3, callbacks=[cb, saver], logger=False,
                      enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    with pytest.raises(RuntimeError):
        trainer.fit(FailsAt(1))
    assert os.path.exists(tmp_path / "crash.ckpt")
    trainer = _trainer(cb)
    trainer.fit(BoringModel(), ckpt_path=None)
    assert trainer.ckpt_path == str(tmp_path / "crash.ckpt")


def test_empty_filename_is_refused(tmp_path):
    with pytest.raises(ValueError, match="filename=''"):
        OnExceptionCheckpoint(tmp_path, filename="")


def test_a_failed_save_does_not_hide_the_run_exception(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where the checkpoint folder should be")
    trainer = _trainer(OnExceptionCheckpoint(blocker), default_root_dir=tmp_path)
    with pytest.warns(UserWarning, match="could not save"), pytest.raises(RuntimeError, match="boom"):
        trainer.fit(FailsAt(1))

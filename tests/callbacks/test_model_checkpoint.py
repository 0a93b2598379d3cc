"""``ModelCheckpoint``'s warnings, compared with Lightning's on the same program: saves triggered by steps under
manual optimization, and a monitored metric that was never logged."""

from __future__ import annotations

import os

import pytest
import torch

from tests.parity import oracle
from tests.parity.recorded import boring_model, both


def _manual(pl, keep_state):
    class Manual(boring_model(pl)):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            loss = self.step(batch)
            if keep_state:  # the recipe Lightning's warning gives: the state before the step, by batch
                if not hasattr(self, "saved_models"):
                    self.saved_models = {}
                self.saved_models[batch_idx] = {k: v.detach().clone() for k, v in self.layer.state_dict().items()}
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()

    return Manual()


@oracle.parity
@pytest.mark.parametrize("keep_state", [False, True])
def test_step_saves_under_manual_optimization_as_in_lightning(tmp_path, keep_state):
    saved = {}

    def program(pl):
        torch.manual_seed(0)
        folder = tmp_path / pl.__name__
        checkpoint = pl.callbacks.ModelCheckpoint(dirpath=folder, every_n_train_steps=2, save_top_k=-1)
        pl.Trainer(default_root_dir=tmp_path, max_steps=4, limit_val_batches=0, logger=False, callbacks=[checkpoint],
                   enable_progress_bar=False, enable_model_summary=False).fit(_manual(pl, keep_state))  # fmt: skip
        saved[pl.__name__] = {
            name: torch.load(folder / name, weights_only=False)["state_dict"] for name in sorted(os.listdir(folder))
        }

    ours, theirs = both(program, r"ModelCheckpoint")
    assert ours == theirs and ours.error is None
    assert len(ours.warnings) == (0 if keep_state else 2)  # at each step-triggered save
    if not keep_state:
        assert ours.warnings[0][0] == "UserWarning" and ours.warnings[0][1].startswith(
            "Using ModelCheckpoint with manual optimization and every_n_train_steps, but no pre-optimization state "
            "was saved. The checkpoint will contain the model state AFTER optimization."
        )
    ours_files, theirs_files = saved["fulmen"], saved["lightning.pytorch"]
    assert list(ours_files) == list(theirs_files) == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"]
    for name in ours_files:  # with the recipe: the weights before the last optimizer step
        for key, value in theirs_files[name].items():
            torch.testing.assert_close(ours_files[name][key], value)


@oracle.parity
def test_a_monitored_metric_never_logged_is_said_in_lightnings_words(tmp_path, monkeypatch):
    from lightning.pytorch.callbacks import model_checkpoint as theirs_module

    from fulmen.callbacks import model_checkpoint as ours_module
    from fulmen.utilities.rank_zero import WarningCache

    monkeypatch.setattr(ours_module, "warning_cache", WarningCache())  # said once per process
    monkeypatch.setattr(theirs_module, "warning_cache", type(theirs_module.warning_cache)())

    def program(pl):
        class Model(boring_model(pl)):
            def training_step(self, batch, batch_idx):
                out = super().training_step(batch, batch_idx)
                self.log("train_loss", out["loss"], on_step=True, on_epoch=True)
                return out

        checkpoint = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / pl.__name__, monitor="val_loss")
        pl.Trainer(default_root_dir=tmp_path, max_epochs=2, limit_train_batches=2, limit_val_batches=0, logger=False,
                   callbacks=[checkpoint], enable_progress_bar=False, enable_model_summary=False).fit(Model())  # fmt: skip

    ours, theirs = both(program, r"ModelCheckpoint")
    assert ours == theirs and ours.error is None
    assert ours.warnings == [("UserWarning", (
        "`ModelCheckpoint(monitor='val_loss')` could not find the monitored key in the returned metrics: "
        "['train_loss', 'train_loss_step', 'train_loss_epoch', 'epoch', 'step']. HINT: Did you call "
        "`log('val_loss', value)` in the `LightningModule`?"
    ))]  # fmt: skip

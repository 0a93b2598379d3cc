"""WeightAveraging / EMAWeightAveraging: the same averaged weights, validation metrics and checkpoint contents
as Lightning's; a resumed run continues the average exactly."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fulmen
from fulmen.callbacks import EMAWeightAveraging, ModelCheckpoint, WeightAveraging
from fulmen.checkpoint import files as checkpoint_io
from tests.parity import oracle


def _module_class(pl):
    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", nn.functional.cross_entropy(self(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.2)

        def _data(self, seed):
            g = torch.Generator().manual_seed(seed)
            return DataLoader(TensorDataset(torch.randn(40, 6, generator=g), torch.randint(0, 2, (40,), generator=g)),
                              batch_size=8)  # fmt: skip

        def train_dataloader(self):
            return self._data(1)

        def val_dataloader(self):
            return self._data(2)

    return Net


def _fit(pl, callback, tmp_path, epochs=3, ckpt_path=None, extra=()):
    model = _module_class(pl)()
    trainer = pl.Trainer(max_epochs=epochs, callbacks=[callback, *extra], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, ckpt_path=ckpt_path)
    return model, trainer


CASES = {
    "swa": lambda pl: pl.callbacks.WeightAveraging(),
    "ema": lambda pl: pl.callbacks.EMAWeightAveraging(decay=0.8, update_starting_at_step=2, update_every_n_steps=2),
    "ema_epochs": lambda pl: pl.callbacks.EMAWeightAveraging(decay=0.5, update_every_n_steps=0, update_starting_at_epoch=1),
}


@oracle.parity
@pytest.mark.parametrize("case", list(CASES))
def test_same_average_metrics_and_checkpoint_as_lightning(tmp_path, case):
    pl = oracle.lightning()
    ours, our_trainer = _fit(fulmen, CASES[case](fulmen), tmp_path / "f")
    theirs, their_trainer = _fit(pl, CASES[case](pl), tmp_path / "l")
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)  # the module ends with the averaged weights
    torch.testing.assert_close(our_trainer.callback_metrics["val_loss"], their_trainer.callback_metrics["val_loss"])
    ours_ckpt = checkpoint_io.load(our_trainer.checkpoint_callback.best_model_path)
    theirs_ckpt = torch.load(their_trainer.checkpoint_callback.best_model_path, weights_only=False)
    for key in ("state_dict", "current_model_state", "averaging_state"):
        assert ours_ckpt[key].keys() == theirs_ckpt[key].keys(), key
        for name in ours_ckpt[key]:
            torch.testing.assert_close(ours_ckpt[key][name], theirs_ckpt[key][name], msg=f"{key}.{name}")


@pytest.mark.parametrize("make", [WeightAveraging, lambda: EMAWeightAveraging(decay=0.7)], ids=["swa", "ema"])
def test_resume_continues_the_average_exactly(tmp_path, make):
    whole, _ = _fit(fulmen, make(), tmp_path / "whole", epochs=4)
    saver = ModelCheckpoint(dirpath=tmp_path / "ck", save_top_k=-1)
    _fit(fulmen, make(), tmp_path / "part", epochs=2, extra=[saver])
    resumed, _ = _fit(fulmen, make(), tmp_path / "resumed", epochs=4, ckpt_path=str(tmp_path / "ck" / "epoch=1-step=10.ckpt"))
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)


def test_load_from_checkpoint_gives_the_averaged_model(tmp_path):
    _, trainer = _fit(fulmen, EMAWeightAveraging(decay=0.5), tmp_path, epochs=2)
    Net = _module_class(fulmen)
    loaded = Net.load_from_checkpoint(trainer.checkpoint_callback.best_model_path)
    saved = checkpoint_io.load(trainer.checkpoint_callback.best_model_path)
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, saved["state_dict"][name])
    assert not all(torch.equal(saved["state_dict"][k], saved["current_model_state"][k]) for k in saved["state_dict"])
    with pytest.raises(ValueError, match="decay value 1.5"):
        EMAWeightAveraging(decay=1.5)

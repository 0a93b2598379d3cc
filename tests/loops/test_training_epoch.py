"""The epoch loop's per-epoch plan (which hooks it may skip or run inline) follows the module it runs."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fulmen
from fulmen.callbacks import ModelCheckpoint


class Plain(fulmen.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class WithHooks(Plain):
    def __init__(self):
        super().__init__()
        self.calls: list[str] = []

    def on_train_batch_start(self, batch, batch_idx):
        self.calls.append(f"start {batch_idx}")

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self.calls.append(f"zero_grad {batch_idx}")
        optimizer.zero_grad()


def test_a_reused_trainer_resuming_mid_epoch_calls_the_new_modules_hooks(tmp_path):
    data = DataLoader(TensorDataset(torch.randn(12, 2)), batch_size=2)
    every_2 = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2, save_top_k=-1)
    trainer = fulmen.Trainer(max_epochs=1, callbacks=[every_2], logger=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(Plain(), data)  # no hooks: the plan skips the batch-start dispatch, zero_grad runs inline
    model = WithHooks()
    trainer.fit(model, data, ckpt_path=tmp_path / "epoch=0-step=2.ckpt")  # resumes inside epoch 0
    assert model.calls == [f"{hook} {i}" for i in range(2, 6) for hook in ("start", "zero_grad")]


@pytest.mark.parametrize("interval", ["00:00:00:02", {"seconds": 2}, __import__("datetime").timedelta(seconds=2)])
def test_time_based_val_check_interval(monkeypatch, interval):
    """Validation runs whenever the interval has passed since the last one (checked after each batch)."""
    import itertools
    import time as time_module

    from fulmen import Trainer
    from fulmen.demos.boring_classes import BoringModel

    clock = itertools.count(0, 1.0)  # each call: one second later
    monkeypatch.setattr(time_module, "monotonic", lambda: next(clock))
    validated_at = []

    class Model(BoringModel):
        def on_validation_start(self):
            if not self.trainer.sanity_checking:
                validated_at.append(self.global_step)

    trainer = Trainer(max_epochs=1, limit_train_batches=6, limit_val_batches=1, num_sanity_val_steps=0,
                      val_check_interval=interval, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(Model())
    assert validated_at == [2, 4, 6]


def test_a_fraction_of_an_epoch_needs_epochs():
    from fulmen import Trainer
    from fulmen.utilities.exceptions import MisconfigurationException

    with pytest.raises(MisconfigurationException, match="should be an integer or a time-based duration"):
        Trainer(val_check_interval=0.5, check_val_every_n_epoch=None)


@pytest.mark.parity
@pytest.mark.parametrize("flag", ["val_check_interval", "accumulate_grad_batches"])
@pytest.mark.parametrize("stage", ["fit", "validate"])
def test_an_interval_of_zero_is_taken_and_fails_fit_as_in_lightning(tmp_path, flag, stage):
    """Lightning takes val_check_interval=0 / accumulate_grad_batches=0 and fails with ZeroDivisionError at the
    first training batch (after the sanity check); validate runs. fulmen's error is a ZeroDivisionError too."""
    from tests.parity.recorded import boring_model, both, raised_as_lightning

    sanity = {}

    def program(pl):
        class Model(boring_model(pl)):
            def on_validation_start(self):
                sanity.setdefault(pl.__name__, []).append(self.trainer.sanity_checking)

        trainer = pl.Trainer(default_root_dir=tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1,
                             logger=False, enable_progress_bar=False, enable_model_summary=False, **{flag: 0})  # fmt: skip
        getattr(trainer, stage)(Model())

    ours, theirs = both(program, r"interval|accumulate")
    assert theirs.error == ("ZeroDivisionError" if stage == "fit" else None)
    assert raised_as_lightning(ours, theirs), (ours, theirs)
    assert sanity["fulmen"] == sanity["lightning.pytorch"]  # the sanity check ran first in both

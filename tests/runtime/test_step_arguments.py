"""Step methods get batch_idx / dataloader_idx only when their signature takes them, as Lightning passes them."""

from __future__ import annotations

import pytest
import torch

import fulmen
from fulmen.demos.boring_classes import BoringModel
from fulmen.runtime.hooks import _fit_step_arguments
from tests.parity import oracle


class BatchOnly(BoringModel):
    def training_step(self, batch):
        return super().training_step(batch, 0)

    def validation_step(self, batch):
        self.log("v", 1.0)

    def predict_step(self, batch):
        return self(batch)


def _trainer(tmp_path):
    return fulmen.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, limit_predict_batches=1,
                          logger=False, enable_progress_bar=False, enable_model_summary=False,
                          default_root_dir=tmp_path)  # fmt: skip


def test_steps_without_batch_idx_run(tmp_path):
    trainer = _trainer(tmp_path)
    trainer.fit(BatchOnly())
    assert trainer.global_step == 2 and float(trainer.callback_metrics["v"]) == 1.0
    assert len(trainer.predict(BatchOnly())) == 1


def test_several_eval_loaders_need_dataloader_idx(tmp_path):
    class TwoLoaders(BoringModel):
        def validation_step(self, batch, batch_idx):
            self.log("v", 1.0)

        def val_dataloader(self):
            return [super().val_dataloader(), super().val_dataloader()]

    with pytest.raises(RuntimeError, match=r"multiple `val_dataloader`, but no `dataloader_idx` argument in "
                                           r"`TwoLoaders.validation_step\(\)`"):  # fmt: skip
        _trainer(tmp_path).fit(TwoLoaders())


def test_the_usual_signatures_are_not_wrapped():
    model = BoringModel()
    assert _fit_step_arguments("training_step", model.training_step, "BoringModel") == model.training_step
    def full(batch, batch_idx, dataloader_idx=0):
        return batch

    assert _fit_step_arguments("validation_step", full, "M") is full
    assert _fit_step_arguments("validation_step", model.validation_step, "M") != model.validation_step  # no room

    def variadic(*args):
        return args

    assert _fit_step_arguments("validation_step", variadic, "M") is variadic


def test_warnings_lightning_gives_for_a_skipped_step_and_a_missing_val_loader(tmp_path, monkeypatch):
    from fulmen.loops.optimization.automatic import Closure
    from fulmen.utilities.rank_zero import WarningCache

    monkeypatch.setattr(Closure, "warning_cache", WarningCache())  # said once per process: not yet, here
    class SkipsAll(fulmen.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(32, 2)

        def training_step(self, batch, batch_idx):
            return None

        def validation_step(self, batch, batch_idx):
            pass

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = _trainer(tmp_path)
    with pytest.warns(UserWarning) as record:
        trainer.fit(SkipsAll(), torch.utils.data.DataLoader(torch.randn(8, 32), batch_size=4))
    messages = [str(w.message) for w in record]
    assert messages.count("`training_step` returned `None`. If this was on purpose, ignore this warning...") == 1
    assert "You defined a `validation_step` but have no `val_dataloader`. Skipping val loop." in messages


@oracle.parity
def test_submodule_modes_survive_validation_as_in_lightning(tmp_path):
    pl = oracle.lightning()
    from lightning.pytorch.demos.boring_classes import BoringModel as LBoring

    def run(trainer_cls, base):
        class Frozen(base):
            def __init__(self):
                super().__init__()
                self.encoder = torch.nn.Sequential(torch.nn.Dropout(0.1), torch.nn.BatchNorm1d(32))
                self.encoder.eval()  # frozen by the user: must stay in eval mode after validation

            def on_train_epoch_end(self):
                self.modes = {name: m.training for name, m in self.named_modules()}

        model = Frozen()
        trainer = trainer_cls(max_epochs=2, limit_train_batches=2, limit_val_batches=1, logger=False,
                              enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
        trainer.fit(model)
        return model.modes

    ours, theirs = run(fulmen.Trainer, BoringModel), run(pl.Trainer, LBoring)
    assert ours == theirs and ours["encoder"] is False and ours[""] is True

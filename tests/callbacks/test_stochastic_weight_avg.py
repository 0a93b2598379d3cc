"""StochasticWeightAveraging against a hand-written torch.optim.swa_utils loop (AveragedModel, SWALR, update_bn),
with and without BatchNorm, stopped early, and resumed from a checkpoint written while averaging."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn
from torch.utils.data import DataLoader, TensorDataset

import fulmen
from fulmen.callbacks import ModelCheckpoint, StochasticWeightAveraging
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle

EPOCHS, START = 6, 3  # swa_epoch_start=3: the third epoch (index 2) is the first that averages


def net(batchnorm: bool) -> nn.Module:
    torch.manual_seed(0)
    layers = [nn.Linear(5, 16)] + ([nn.BatchNorm1d(16)] if batchnorm else []) + [nn.Tanh(), nn.Linear(16, 1)]
    return nn.Sequential(*layers)


def loader() -> DataLoader:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(64, 5, generator=g)
    return DataLoader(TensorDataset(x, x[:, :2].sum(1, keepdim=True)), batch_size=8)


def optimizer_and_scheduler(params):
    optimizer = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.8)


class Module(fulmen.LightningModule):
    def __init__(self, batchnorm: bool):
        super().__init__()
        self.net = net(batchnorm)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self):
        optimizer, scheduler = optimizer_and_scheduler(self.parameters())
        return [optimizer], [scheduler]


def hand_loop(batchnorm: bool, max_steps: int | None = None) -> nn.Module:
    """torch's recipe: SWALR and AveragedModel from the start epoch, the average applied, update_bn."""
    model = net(batchnorm)
    optimizer, scheduler = optimizer_and_scheduler(model.parameters())
    average = swa_scheduler = None
    steps = 0
    for epoch in range(EPOCHS):
        if epoch == START - 1:
            average = AveragedModel(model)
            swa_scheduler = SWALR(optimizer, swa_lr=0.05, anneal_epochs=2, anneal_strategy="cos")
        for x, y in loader():
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            steps += 1
            if steps == max_steps:
                break
        if steps == max_steps:
            if average is not None:
                average.update_parameters(model)
            break
        if average is not None:
            average.update_parameters(model)
            swa_scheduler.step()
        else:
            scheduler.step()
    with torch.no_grad():
        for mine, averaged in zip(model.parameters(), average.module.parameters()):
            mine.copy_(averaged)
    update_bn(loader(), model)
    return model


def fit(
    batchnorm: bool, tmp_path=None, ckpt_path=None, callbacks=(), **kwargs
) -> tuple[Module, StochasticWeightAveraging]:
    module = Module(batchnorm)
    swa = StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=START, annealing_epochs=2)
    trainer = fulmen.Trainer(max_epochs=EPOCHS, logger=False, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=bool(callbacks), callbacks=[swa, *callbacks],
                             default_root_dir=tmp_path, **kwargs)  # fmt: skip
    trainer.fit(module, loader(), ckpt_path=ckpt_path)
    return module, swa


def assert_same(module: Module, reference: nn.Module) -> None:
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(module.net.state_dict()[name], value, rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize("batchnorm", [False, True])
def test_matches_torch_swa_recipe(batchnorm):
    module, swa = fit(batchnorm)
    assert swa.n_averaged == EPOCHS - START + 1  # the last epoch included
    assert_same(module, hand_loop(batchnorm))


def test_stopped_early_the_last_weights_join_the_average():
    module, swa = fit(True, max_steps=37)  # stops inside the fifth epoch, after averaging began
    assert swa.n_averaged == 3  # epochs 3 and 4, and the weights at step 37
    assert_same(module, hand_loop(True, max_steps=37))


@pytest.mark.parametrize("batchnorm", [False, True])
def test_resumed_while_averaging_ends_as_uninterrupted(tmp_path, batchnorm):
    every_5 = ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=5, save_top_k=-1)
    fit(batchnorm, tmp_path, callbacks=[every_5])
    checkpoint = tmp_path / "ckpt" / "epoch=3-step=30.ckpt"  # epoch index 3: averaging since epoch index 2
    assert torch.load(checkpoint, weights_only=True)["callbacks"]
    resumed, swa = fit(batchnorm, tmp_path, ckpt_path=str(checkpoint))
    assert swa.n_averaged == EPOCHS - START + 1
    assert_same(resumed, hand_loop(batchnorm))


def test_the_one_x_flag_and_errors():
    trainer = fulmen.Trainer(stochastic_weight_avg=True, logger=False, max_epochs=1)
    swa = [cb for cb in trainer.callbacks if isinstance(cb, StochasticWeightAveraging)]
    assert len(swa) == 1 and swa[0].swa_lrs is None and swa[0].swa_epoch_start == 0.8
    six = fulmen.Trainer(max_epochs=6, logger=False)
    assert StochasticWeightAveraging(0.1, swa_epoch_start=0.5).swa_start(six) == 3  # a fraction: epoch index 3
    assert StochasticWeightAveraging(0.1, swa_epoch_start=3).swa_start(six) == 2  # 1-based: the third epoch

    class TwoOptimizers(Module):
        def training_step(self, batch, batch_idx, optimizer_idx):
            return super().training_step(batch, batch_idx)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.SGD(self.parameters(), lr=0.1)

    class TwoSchedulers(Module):
        def configure_optimizers(self):
            optimizer, scheduler = optimizer_and_scheduler(self.parameters())
            return [optimizer], [scheduler, torch.optim.lr_scheduler.ExponentialLR(optimizer, 0.9)]

    seen = []

    class Look(fulmen.Callback):
        def on_train_batch_start(self, *args):
            seen.append(1)

    for model, match in (
        (TwoOptimizers(False), "one optimizer"),
        (TwoSchedulers(False), "one learning-rate"),
    ):
        with pytest.raises(MisconfigurationException, match=match):  # before any training step
            fulmen.Trainer(max_epochs=1, logger=False, callbacks=[StochasticWeightAveraging(0.1), Look()]).fit(
                model, loader()
            )
    assert seen == []
    for bad, match in (({"swa_epoch_start": 0}, "swa_epoch_start=0"), ({"swa_lrs": -1.0}, "swa_lrs=-1.0"),
                       ({"annealing_strategy": "step"}, "annealing_strategy='step'")):  # fmt: skip
        with pytest.raises(MisconfigurationException, match=match):
            StochasticWeightAveraging(**{"swa_lrs": 0.1, **bad})


def test_a_step_scheduler_is_swapped_with_a_warning_and_int_rates_are_refused(caplog):
    import logging

    from fulmen.demos.boring_classes import BoringModel

    class Stepwise(BoringModel):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1),
                                                       "interval": "step"}}  # fmt: skip

    trainer = fulmen.Trainer(fast_dev_run=True, callbacks=[StochasticWeightAveraging(swa_lrs=1e-2)])
    with caplog.at_level(logging.INFO), pytest.warns(UserWarning, match="SWA is currently only supported every epoch"):
        trainer.fit(Stepwise())
    assert "Swapping scheduler `StepLR` for `SWALR`" in caplog.text
    with pytest.raises(MisconfigurationException, match="a list of positive floats"):
        StochasticWeightAveraging(swa_lrs=[0.2, 1])


def _swa_checkpoint(pl, root, swa_lrs):
    """Two param groups, SWA from the second of three epochs; the last checkpoint's param groups."""

    class Two(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.a, self.b = nn.Linear(5, 5), nn.Linear(5, 1)

        def training_step(self, batch, batch_idx):
            return nn.functional.mse_loss(self.b(self.a(batch[0])), batch[1])

        def configure_optimizers(self):
            return torch.optim.Adam([{"params": self.a.parameters(), "lr": 0.1}, {"params": self.b.parameters(), "lr": 0.2}])

    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=root, save_last=True)
    trainer = pl.Trainer(max_epochs=3, limit_val_batches=0, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=root,
                         callbacks=[pl.callbacks.StochasticWeightAveraging(swa_lrs=swa_lrs, swa_epoch_start=2), checkpoint])  # fmt: skip
    trainer.fit(Two(), loader())
    saved = torch.load(checkpoint.last_model_path, weights_only=False)
    return [{k: g[k] for k in ("lr", "initial_lr", "swa_lr")} for g in saved["optimizer_states"][0]["param_groups"]]


@oracle.parity
@pytest.mark.parametrize("swa_lrs", [[0.123, 0.321], 0.05])
def test_the_swa_rates_are_the_groups_starting_rates_in_the_checkpoint_as_with_lightning(tmp_path, swa_lrs):
    groups = _swa_checkpoint(fulmen, tmp_path / "fulmen", swa_lrs)
    assert [g["initial_lr"] for g in groups] == (swa_lrs if isinstance(swa_lrs, list) else [swa_lrs] * 2)
    assert groups == _swa_checkpoint(oracle.lightning(), tmp_path / "lightning", swa_lrs)

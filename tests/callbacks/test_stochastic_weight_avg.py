"""StochasticWeightAveraging against a hand-written torch.optim.swa_utils loop (AveragedModel, SWALR, update_bn),
with and without BatchNorm, stopped early, and resumed from a checkpoint written while averaging."""

from __future__ import annotations

import importlib

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
    assert StochasticWeightAveraging(0.1, swa_epoch_start=3).swa_start == 2  # 1-based: the third epoch

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


# -- Lightning's public helpers: same results on the same inputs, and the callback goes through them -------------
def _bn_net(pl):
    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6, momentum=0.3), nn.Linear(6, 1))

        def training_step(self, batch, batch_idx):
            return nn.functional.mse_loss(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Net()


def _helpers_applied(pl):
    swa_class = pl.callbacks.StochasticWeightAveraging
    average, current = _bn_net(pl), _bn_net(pl)
    with torch.no_grad():
        for p in current.parameters():
            p.add_(torch.arange(p.numel(), dtype=p.dtype).reshape(p.shape) / 10)
    n = torch.tensor(0, dtype=torch.long)
    swa_class.update_parameters(average, current, n, swa_class.avg_fn)  # n == 0: a copy
    copied = [p.clone() for p in average.parameters()]
    with torch.no_grad():
        for p in current.parameters():
            p.mul_(3)
    swa_class.update_parameters(average, current, n, swa_class.avg_fn)  # the running mean of the two
    averaged = [p.clone() for p in average.parameters()]
    mean = swa_class.avg_fn(torch.tensor([1.0, 2.0]), torch.tensor([4.0, 8.0]), torch.tensor(2))
    target = _bn_net(pl)
    swa_class.transfer_weights(average, target)
    swa = swa_class(swa_lrs=0.1)
    bn = target.net[1]
    bn.running_mean.fill_(5.0)
    bn.num_batches_tracked.fill_(7)
    swa.reset_batch_norm_and_save_state(target)
    reset = (bn.running_mean.clone(), bn.running_var.clone(), int(bn.num_batches_tracked), bn.momentum)
    swa.reset_momenta()
    return {
        "copied": copied, "averaged": averaged, "n": int(n), "mean": mean,
        "transferred": [p.clone() for p in target.parameters()], "reset": reset, "momentum": bn.momentum,
        "has_bn": (swa_class.pl_module_contains_batch_norm(target),
                   swa_class.pl_module_contains_batch_norm(nn.Sequential(nn.Linear(2, 2)))),
    }  # fmt: skip


@oracle.parity
def test_the_helpers_give_lightnings_tensors():
    ours, theirs = _helpers_applied(fulmen), _helpers_applied(oracle.lightning())
    assert ours["n"] == theirs["n"] == 2 and ours["has_bn"] == theirs["has_bn"] == (True, False)
    assert ours["reset"][2:] == theirs["reset"][2:] == (0, None) and ours["momentum"] == theirs["momentum"] == 0.3
    for key in ("copied", "averaged", "transferred"):
        for mine, lightning in zip(ours[key], theirs[key], strict=True):
            torch.testing.assert_close(mine, lightning, rtol=0, atol=0, msg=key)
    for mine, lightning in zip(ours["reset"][:2], theirs["reset"][:2]):
        torch.testing.assert_close(mine, lightning, rtol=0, atol=0)
    torch.testing.assert_close(ours["mean"], theirs["mean"])


def _start_and_end(pl, swa_epoch_start, max_epochs):
    seen = {}

    class Look(pl.callbacks.StochasticWeightAveraging):
        def on_train_epoch_start(self, trainer, pl_module):
            seen["start_end"] = (self.swa_start, self.swa_end)
            super().on_train_epoch_start(trainer, pl_module)

    callback = Look(swa_lrs=0.1, swa_epoch_start=swa_epoch_start)
    trainer = pl.Trainer(max_epochs=max_epochs, limit_train_batches=1, limit_val_batches=0, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                         callbacks=[callback])  # fmt: skip
    trainer.fit(importlib.import_module(f"{pl.__name__}.demos.boring_classes").BoringModel())
    return seen["start_end"]


@oracle.parity
@pytest.mark.parametrize(("swa_epoch_start", "max_epochs"), [(3, 4), (0.5, 6), (0.8, 5), (1.0, 3)])
def test_swa_start_and_end_are_lightnings(swa_epoch_start, max_epochs):
    """A fraction becomes a 1-based epoch number (0.5 of 6 epochs: the third, index 2), as in Lightning."""
    ours = _start_and_end(fulmen, swa_epoch_start, max_epochs)
    assert ours == _start_and_end(oracle.lightning(), swa_epoch_start, max_epochs)
    assert StochasticWeightAveraging(0.1, swa_epoch_start=2).swa_start == 1  # an int: known before fit


def test_the_callback_goes_through_its_public_helpers():
    """A subclass overriding a helper changes what the callback does (here: counts the calls, and averages
    with another function)."""
    calls = []

    class Counting(StochasticWeightAveraging):
        @staticmethod
        def update_parameters(average_model, model, n_averaged, avg_fn):
            calls.append(("update", int(n_averaged)))
            StochasticWeightAveraging.update_parameters(average_model, model, n_averaged, avg_fn)

        @staticmethod
        def transfer_weights(src_pl_module, dst_pl_module):
            calls.append("transfer")
            StochasticWeightAveraging.transfer_weights(src_pl_module, dst_pl_module)

        def reset_batch_norm_and_save_state(self, pl_module):
            calls.append("reset_bn")
            super().reset_batch_norm_and_save_state(pl_module)

        def reset_momenta(self):
            calls.append("momenta")
            super().reset_momenta()

    swa = Counting(swa_lrs=0.05, swa_epoch_start=START, annealing_epochs=2)
    module = Module(True)
    momentum = module.net[1].momentum
    trainer = fulmen.Trainer(max_epochs=EPOCHS, logger=False, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=False, callbacks=[swa])  # fmt: skip
    trainer.fit(module, loader())
    updates = [c for c in calls if isinstance(c, tuple)]
    assert updates == [("update", n) for n in range(EPOCHS - START + 1)]
    assert calls[len(updates):] == ["transfer", "reset_bn", "momenta"]
    assert module.net[1].momentum == momentum and swa.momenta  # put back, and remembered
    assert_same(module, hand_loop(True))  # the same result as without the subclass


def test_a_custom_avg_fn_is_used_and_the_default_is_the_static_method():
    counts = []

    def latest(averaged, current, n):  # the "average" is the latest weights
        counts.append(int(n))
        return current

    final = {}

    class Last(fulmen.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            final["weight"] = pl_module.net[0].weight.detach().clone()

    assert StochasticWeightAveraging(swa_lrs=0.1)._avg_fn == StochasticWeightAveraging.avg_fn
    module = Module(False)
    trainer = fulmen.Trainer(max_epochs=EPOCHS, logger=False, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=False,
                             callbacks=[StochasticWeightAveraging(0.05, START, 2, avg_fn=latest), Last()])  # fmt: skip
    trainer.fit(module, loader())
    per_update = len(list(module.parameters()))  # called once per parameter; n == 0 copies without it
    assert counts == [n for n in range(1, EPOCHS - START + 1) for _ in range(per_update)]
    torch.testing.assert_close(module.net[0].weight, final["weight"], rtol=0, atol=0)
    with pytest.raises(MisconfigurationException, match="avg_fn"):
        StochasticWeightAveraging(0.1, avg_fn=3)

"""The ordered list of every hook call for fit, validate, test and predict (Lightning's order)."""

from __future__ import annotations

import importlib
import inspect

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.parity import oracle

_MODULE_HOOKS = [
    "prepare_data", "setup", "teardown", "configure_callbacks", "configure_model", "configure_optimizers",
    "training_step", "validation_step", "test_step", "predict_step", "backward", "optimizer_step",
    "optimizer_zero_grad", "lr_scheduler_step", "configure_gradient_clipping", "transfer_batch_to_device",
    "on_before_batch_transfer", "on_after_batch_transfer", "train_dataloader", "val_dataloader",
    "test_dataloader", "predict_dataloader",
]  # fmt: skip


def record_hooks(framework: str, fn: str) -> list[str]:
    pl = importlib.import_module(framework)
    calls: list[str] = []
    callback_hooks = [
        n for n, _ in inspect.getmembers(pl.Callback, inspect.isfunction)
        if n.startswith("on_") or n in ("setup", "teardown")
    ]  # fmt: skip

    class Rec(pl.Callback):
        pass

    def cb_wrap(name):
        def f(self, *args, **kwargs):
            calls.append(f"cb.{name}")

        return f

    for name in callback_hooks:
        setattr(Rec, name, cb_wrap(name))

    class M(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.layer(x)

        def training_step(self, batch, batch_idx):
            return self(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            self.log("v", self(batch[0]).sum())

        def test_step(self, batch, batch_idx):
            self.log("t", self(batch[0]).sum())

        def predict_step(self, batch, batch_idx):
            return self(batch[0])

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1)]

        def _dl(self):
            return DataLoader(TensorDataset(torch.randn(4, 4)), batch_size=2)

        def train_dataloader(self):
            return self._dl()

        def val_dataloader(self):
            return self._dl()

        def test_dataloader(self):
            return self._dl()

        def predict_dataloader(self):
            return self._dl()

    def m_wrap(name):
        original = getattr(M, name)

        def f(self, *args, **kwargs):
            calls.append(f"m.{name}")
            return original(self, *args, **kwargs)

        return f

    module_hooks = _MODULE_HOOKS + [n for n in dir(pl.LightningModule) if n.startswith("on_")]
    for name in sorted(set(module_hooks)):
        if hasattr(M, name) and name != "on_exception":
            setattr(M, name, m_wrap(name))
    trainer = pl.Trainer(
        callbacks=[Rec()], logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, max_epochs=1, limit_val_batches=1, num_sanity_val_steps=1,
    )  # fmt: skip
    getattr(trainer, fn)(M())
    return calls


_VAL_RUN = [
    "m.on_validation_model_eval", "cb.on_validation_start", "m.on_validation_start",
    "cb.on_validation_epoch_start", "m.on_validation_epoch_start",
    "m.on_before_batch_transfer", "m.transfer_batch_to_device", "m.on_after_batch_transfer",
    "cb.on_validation_batch_start", "m.on_validation_batch_start", "m.validation_step",
    "cb.on_validation_batch_end", "m.on_validation_batch_end",
    "cb.on_validation_epoch_end", "m.on_validation_epoch_end", "cb.on_validation_end", "m.on_validation_end",
    "m.on_validation_model_train",
]  # fmt: skip
_TRAIN_BATCH = [
    "m.on_before_batch_transfer", "m.transfer_batch_to_device", "m.on_after_batch_transfer",
    "cb.on_train_batch_start", "m.on_train_batch_start", "m.optimizer_step", "m.training_step",
    "cb.on_before_zero_grad", "m.on_before_zero_grad", "m.optimizer_zero_grad",
    "cb.on_before_backward", "m.on_before_backward", "m.backward", "cb.on_after_backward", "m.on_after_backward",
    "cb.on_before_optimizer_step", "m.on_before_optimizer_step", "m.configure_gradient_clipping",
]  # fmt: skip
_SETUP = ["m.configure_callbacks", "m.prepare_data", "cb.setup", "m.setup", "m.configure_model"]


def _eval_batch(stage: str) -> list[str]:
    return [
        "m.on_before_batch_transfer", "m.transfer_batch_to_device", "m.on_after_batch_transfer",
        f"cb.on_{stage}_batch_start", f"m.on_{stage}_batch_start", f"m.{stage}_step",
        f"cb.on_{stage}_batch_end", f"m.on_{stage}_batch_end",
    ]  # fmt: skip


EXPECTED = {
    "fit": [
        *_SETUP, "m.configure_optimizers", "cb.on_fit_start", "m.on_fit_start",
        "cb.on_sanity_check_start", "m.val_dataloader", *_VAL_RUN, "cb.on_sanity_check_end",
        "m.train_dataloader", "cb.on_train_start", "m.on_train_start",
        "cb.on_train_epoch_start", "m.on_train_epoch_start",
        *_TRAIN_BATCH, "cb.on_train_batch_end", "m.on_train_batch_end",
        *_TRAIN_BATCH, "m.lr_scheduler_step", "cb.on_train_batch_end", "m.on_train_batch_end",
        "m.on_validation_model_zero_grad", *_VAL_RUN,
        "cb.on_train_epoch_end", "m.on_train_epoch_end", "cb.on_train_end", "m.on_train_end",
        "cb.on_fit_end", "m.on_fit_end", "cb.teardown", "m.teardown",
    ],
    "validate": [*_SETUP, "m.val_dataloader", *_VAL_RUN, "cb.teardown", "m.teardown"],
    "test": [
        *_SETUP, "m.test_dataloader", "m.on_test_model_eval", "cb.on_test_start", "m.on_test_start",
        "cb.on_test_epoch_start", "m.on_test_epoch_start", *_eval_batch("test"), *_eval_batch("test"),
        "cb.on_test_epoch_end", "m.on_test_epoch_end", "cb.on_test_end", "m.on_test_end",
        "m.on_test_model_train", "cb.teardown", "m.teardown",
    ],
    "predict": [
        *_SETUP, "m.predict_dataloader", "m.on_predict_model_eval", "cb.on_predict_start", "m.on_predict_start",
        "cb.on_predict_epoch_start", "m.on_predict_epoch_start", *_eval_batch("predict"), *_eval_batch("predict"),
        "cb.on_predict_epoch_end", "m.on_predict_epoch_end", "cb.on_predict_end", "m.on_predict_end",
        "cb.teardown", "m.teardown",
    ],
}  # fmt: skip


@pytest.mark.parametrize("fn", ["fit", "validate", "test", "predict"])
def test_hook_order(fn):
    assert record_hooks("fulmen", fn) == EXPECTED[fn]


@oracle.parity
@pytest.mark.parametrize("fn", ["fit", "validate", "test", "predict"])
def test_hook_order_matches_lightning(fn):
    oracle.lightning()
    assert record_hooks("fulmen", fn) == record_hooks("lightning.pytorch", fn)

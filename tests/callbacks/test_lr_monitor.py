"""``LearningRateMonitor`` against lightning==2.6.6: keys (named groups, groups added while training),
momentum / weight-decay values, and the values callbacks can monitor."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import optim

import fulmen
import fulmen.demos.boring_classes
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle
from tests.parity.oracle import parity


def _run(base: Any, demos: Any, tmp_path) -> dict[str, Any]:
    class Manual(demos.BoringModel):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.extra = torch.nn.Linear(32, 2)

        def training_step(self, batch, batch_idx):
            for opt in self.optimizers():
                loss = self.step(batch)
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()

        def configure_optimizers(self):
            params = list(self.layer.parameters())
            sgd, adam, adamw = optim.SGD(params, lr=0.1), optim.Adam(params, lr=0.1), optim.AdamW(params, lr=0.1)
            return [sgd, adam, adamw], [optim.lr_scheduler.StepLR(sgd, 1), optim.lr_scheduler.StepLR(adam, 1)]

    class AddGroup(base.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            if trainer.current_epoch == 1:
                trainer.optimizers[0].add_param_group({"params": list(pl_module.extra.parameters()), "lr": 0.05})

    class Named(demos.BoringModel):
        def configure_optimizers(self):
            return optim.SGD([{"params": self.layer.weight, "name": "w"}, {"params": self.layer.bias, "lr": 0.5}],
                             lr=0.1, momentum=0.9)  # fmt: skip

    def fit(model, monitor, callbacks=()):
        trainer = base.Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=0, callbacks=[*callbacks, monitor],
                               enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                               logger=base.loggers.CSVLogger(tmp_path))  # fmt: skip
        trainer.fit(model)
        return trainer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        grown = base.callbacks.LearningRateMonitor()
        fit(Manual(), grown, [AddGroup()])
        named = base.callbacks.LearningRateMonitor(log_momentum=True, log_weight_decay=True)
        trainer = fit(Named(), named)
    return {"grown": grown.lrs, "named": named.lrs, "momentum": named.last_momentum_values,
            "weight_decay": named.last_weight_decay_values, "callback_metrics": sorted(trainer.callback_metrics)}  # fmt: skip


@parity
def test_lr_monitor_matches_lightning(tmp_path):
    ours = _run(fulmen, fulmen.demos.boring_classes, tmp_path / "f")
    theirs = _run(oracle.lightning(), oracle.lightning("lightning.pytorch.demos.boring_classes"), tmp_path / "l")
    assert ours == theirs
    assert list(ours["grown"]) == ["lr-Adam", "lr-AdamW", "lr-SGD/pg1", "lr-SGD/pg2"]


def test_duplicate_group_names_and_missing_momentum(tmp_path):
    class Twice(fulmen.demos.boring_classes.BoringModel):
        def configure_optimizers(self):
            return optim.SGD([{"params": self.layer.weight, "name": "x"}, {"params": self.layer.bias, "name": "x"}],
                             lr=0.1)  # fmt: skip

    def trainer(monitor):
        return fulmen.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, callbacks=[monitor],
                              enable_progress_bar=False, logger=fulmen.loggers.CSVLogger(tmp_path))  # fmt: skip

    with pytest.raises(MisconfigurationException, match="identical `name` values"):
        trainer(fulmen.callbacks.LearningRateMonitor()).fit(Twice())
    class NoMomentum(fulmen.demos.boring_classes.BoringModel):
        def configure_optimizers(self):
            return optim.ASGD(self.parameters(), lr=0.1)

    monitor = fulmen.callbacks.LearningRateMonitor(log_momentum=True)
    with pytest.warns(RuntimeWarning, match="some optimizers do not have momentum"):
        trainer(monitor).fit(NoMomentum())
    assert monitor.last_momentum_values == {"lr-ASGD-momentum": 0.0}

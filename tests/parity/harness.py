"""Run one training scenario under fulmen or under lightning.pytorch and summarise what happened.

The module and data are built from the framework namespace given, so both runs execute the same user code.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset


def framework(name: str) -> Any:
    return importlib.import_module("fulmen" if name == "fulmen" else "lightning.pytorch")


def make_data(n: int = 40, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)
    y = (x[:, :2].sum(1, keepdim=True) > 0).float()
    return TensorDataset(x, y)


def run_scenario(name: str, scenario: dict[str, Any]) -> dict[str, Any]:
    pl = framework(name)
    record: list[str] = []
    events: dict[str, list[Any]] = {"val_at": [], "lrs": [], "train_epoch_end_metrics": []}
    opts = scenario.get("module", {})

    class Recorder(pl.Callback):
        def on_validation_start(self, trainer, pl_module):
            if not trainer.sanity_checking:
                events["val_at"].append((trainer.current_epoch, trainer.global_step))

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            events["lrs"].append([g["lr"] for o in trainer.optimizers for g in o.param_groups])

        def on_train_epoch_end(self, trainer, pl_module):
            events["train_epoch_end_metrics"].append(
                {k: float(v) for k, v in sorted(trainer.callback_metrics.items())}
            )

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(1)
            layers = [torch.nn.Linear(6, 8), torch.nn.Tanh()]
            if opts.get("dropout"):  # draws from the global RNG at every training step
                layers.append(torch.nn.Dropout(opts["dropout"]))
            self.net = torch.nn.Sequential(*layers, torch.nn.Linear(8, 1))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.binary_cross_entropy_with_logits(self(x), y)
            if opts.get("log_train", True):
                self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
            if opts.get("return_none_every") and batch_idx % opts["return_none_every"] == 1:
                return None
            if opts.get("return_dict"):
                return {"loss": loss, "extra": loss.detach() * 2}
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.binary_cross_entropy_with_logits(self(x), y)
            self.log("val_loss", loss)
            self.log("val_max", loss, reduce_fx="max")
            self.log("val_sum", loss, reduce_fx="sum")

        def configure_optimizers(self):
            kind = opts.get("optimizer", "sgd")
            if kind == "adam":
                opt = torch.optim.Adam(self.parameters(), lr=0.01)
            elif kind == "lbfgs":
                opt = torch.optim.LBFGS(self.parameters(), lr=0.1, max_iter=3)
            else:
                opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
            sched = opts.get("scheduler")
            if sched is None:
                return opt
            if sched == "step_epoch":
                return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)]
            if sched == "step_interval":
                s = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
                return {
                    "optimizer": opt,
                    "lr_scheduler": {
                        "scheduler": s,
                        "interval": "step",
                        "frequency": opts.get("frequency", 1),
                    },
                }
            if sched == "plateau":
                s = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
                return {"optimizer": opt, "lr_scheduler": s, "monitor": opts.get("monitor", "val_loss")}
            if sched == "onecycle":
                s = torch.optim.lr_scheduler.OneCycleLR(
                    opt, max_lr=0.2, total_steps=self.trainer.estimated_stepping_batches
                )
                return {"optimizer": opt, "lr_scheduler": {"scheduler": s, "interval": "step"}}
            raise ValueError(sched)

    torch.manual_seed(0)
    model = Model()
    if "seed" in scenario:  # seed_everything after the model: the loaders' shuffles and dropout follow it
        pl.seed_everything(scenario["seed"], workers=True, verbose=False)
    ds = make_data(scenario.get("n", 40))
    shuffle, workers = scenario.get("shuffle", False), scenario.get("workers", 0)
    train = DataLoader(ds, batch_size=scenario.get("batch_size", 8), shuffle=shuffle, num_workers=workers)
    val = DataLoader(make_data(16, seed=1), batch_size=4 if shuffle else 8, shuffle=shuffle, num_workers=workers)
    callbacks = [Recorder()]
    if "early_stopping" in scenario:
        callbacks.append(pl.callbacks.EarlyStopping(**scenario["early_stopping"]))
    trainer_kwargs = dict(
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        accelerator="cpu",
        devices=1,
    )
    trainer_kwargs.update(scenario.get("trainer", {}))
    trainer = pl.Trainer(**trainer_kwargs)
    trainer.fit(model, train, val if scenario.get("val", True) else None)
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return {
        "weights": weights,
        "global_step": trainer.global_step,
        "current_epoch": trainer.current_epoch,
        "val_at": events["val_at"],
        "lrs": events["lrs"],
        "callback_metrics": {k: float(v) for k, v in sorted(trainer.callback_metrics.items())},
        "epoch_end_metrics": events["train_epoch_end_metrics"],
        "should_stop": trainer.should_stop,
        "record": record,
    }

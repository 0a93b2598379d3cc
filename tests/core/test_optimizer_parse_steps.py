"""Lightning's private steps of parsing ``configure_optimizers``' return, which its tests and some libraries
call (``lightning.pytorch.core.optimizer._configure_optimizers`` ...): the same parts, configs and warnings."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch
from torch import optim

from tests.parity import oracle


def _steps(root: str):
    if root != "fulmen":
        oracle.lightning()
    return importlib.import_module(f"{root}.core.optimizer")


def _configs(steps, conf):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        optimizers, schedulers, monitor = steps._configure_optimizers(conf)
        configs = steps._configure_schedulers_automatic_opt(schedulers, monitor)
    described = [(type(c.scheduler).__name__, c.interval, c.frequency, c.monitor, c.reduce_on_plateau, c.strict)
                 for c in configs]  # fmt: skip
    messages = sorted((w.category.__name__, str(w.message).split(":")[0].split(".")[0]) for w in caught)
    return len(optimizers), described, monitor, messages


def _conf(kind: str):
    model = torch.nn.Linear(2, 2)
    opt = optim.Adam(model.parameters())
    return {
        "optimizer": lambda: opt,
        "dict with extra keys": lambda: {"optimizer": opt, "lr_scheduler": {"scheduler": optim.lr_scheduler.StepLR(opt, 1)},
                                         "foo": 1},
        "plateau with monitor": lambda: {"optimizer": opt, "monitor": "loss",
                                         "lr_scheduler": optim.lr_scheduler.ReduceLROnPlateau(opt)},
        "lists": lambda: ([opt], [optim.lr_scheduler.StepLR(opt, 1)]),
        "one-cycle per epoch": lambda: {"optimizer": opt, "lr_scheduler": {
            "scheduler": optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01, total_steps=3)}},
        "scheduler dict, step interval": lambda: {"optimizer": opt, "lr_scheduler": {
            "scheduler": optim.lr_scheduler.StepLR(opt, 1), "interval": "step", "frequency": 2, "name": "s"}},
    }[kind]()  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("kind", ["optimizer", "dict with extra keys", "plateau with monitor", "lists",
                                  "one-cycle per epoch", "scheduler dict, step interval"])  # fmt: skip
def test_the_parts_and_configs_are_lightnings(kind):
    ours, theirs = _steps("fulmen"), _steps("lightning.pytorch")
    assert _configs(ours, _conf(kind)) == _configs(theirs, _conf(kind))


@oracle.parity
def test_init_from_the_module():
    for root in ("fulmen", "lightning.pytorch"):
        boring = importlib.import_module(f"{root}.demos.boring_classes").BoringModel()
        boring.trainer = importlib.import_module(root).Trainer(logger=False)  # Lightning calls the hook through it
        optimizers, configs = _steps(root)._init_optimizers_and_lr_schedulers(boring)
        assert [type(o).__name__ for o in optimizers] == ["SGD"]
        assert [type(c.scheduler).__name__ for c in configs] == ["StepLR"]

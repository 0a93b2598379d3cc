"""Loggers: ``CSVLogger``, ``TensorBoardLogger``, ``MLFlowLogger``, ``WandbLogger``, ``CometLogger``,
``NeptuneLogger`` and the ``Logger`` base class. Each class is imported from its module when first used, and
each module imports its package (tensorboard, mlflow, ...) only when the logger is used."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fulmen.loggers.comet import CometLogger
    from fulmen.loggers.csv_logs import CSVLogger
    from fulmen.loggers.logger import Logger
    from fulmen.loggers.mlflow import MLFlowLogger
    from fulmen.loggers.neptune import NeptuneLogger
    from fulmen.loggers.tensorboard import TensorBoardLogger
    from fulmen.loggers.wandb import WandbLogger

_WHERE = {
    "CSVLogger": "csv_logs",
    "CometLogger": "comet",
    "Logger": "logger",
    "MLFlowLogger": "mlflow",
    "NeptuneLogger": "neptune",
    "TensorBoardLogger": "tensorboard",
    "WandbLogger": "wandb",
}


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fulmen.loggers' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fulmen.loggers.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "CSVLogger",
    "CometLogger",
    "Logger",
    "MLFlowLogger",
    "NeptuneLogger",
    "TensorBoardLogger",
    "WandbLogger",
]

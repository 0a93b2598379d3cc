"""Loggers: ``CSVLogger``, ``TensorBoardLogger``, ``MLFlowLogger``, ``WandbLogger``, ``CometLogger``,
``NeptuneLogger``, ``LitLogger`` (lightning.ai: it constructs, and fails when used) and the ``Logger`` base
class. Each class is imported from its module when first used, and each module imports its package
(tensorboard, mlflow, ...) only when the logger is used."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.utilities.imports import lazy_exports

if TYPE_CHECKING:
    from fulmen.loggers.comet import CometLogger
    from fulmen.loggers.csv_logs import CSVLogger
    from fulmen.loggers.litlogger import LitLogger
    from fulmen.loggers.logger import Logger
    from fulmen.loggers.mlflow import MLFlowLogger
    from fulmen.loggers.neptune import NeptuneLogger
    from fulmen.loggers.tensorboard import TensorBoardLogger
    from fulmen.loggers.wandb import WandbLogger

_WHERE = {
    "CSVLogger": "csv_logs",
    "CometLogger": "comet",
    "LitLogger": "litlogger",
    "Logger": "logger",
    "MLFlowLogger": "mlflow",
    "NeptuneLogger": "neptune",
    "TensorBoardLogger": "tensorboard",
    "WandbLogger": "wandb",
}

__getattr__, __dir__ = lazy_exports("fulmen.loggers", _WHERE)


__all__ = [
    "CSVLogger",
    "CometLogger",
    "LitLogger",
    "Logger",
    "MLFlowLogger",
    "NeptuneLogger",
    "TensorBoardLogger",
    "WandbLogger",
]

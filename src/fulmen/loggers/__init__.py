"""Loggers: ``CSVLogger``, ``TensorBoardLogger``, ``MLFlowLogger``, ``WandbLogger``, ``CometLogger``,
``NeptuneLogger`` and the ``Logger`` base class. Each imports its package only when it is used."""

from fulmen.loggers.comet import CometLogger
from fulmen.loggers.csv_logs import CSVLogger
from fulmen.loggers.logger import Logger
from fulmen.loggers.mlflow import MLFlowLogger
from fulmen.loggers.neptune import NeptuneLogger
from fulmen.loggers.tensorboard import TensorBoardLogger
from fulmen.loggers.wandb import WandbLogger

__all__ = ["CSVLogger", "CometLogger", "Logger", "MLFlowLogger", "NeptuneLogger", "TensorBoardLogger", "WandbLogger"]

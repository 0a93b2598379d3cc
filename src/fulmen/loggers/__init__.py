"""Loggers: ``CSVLogger``, ``TensorBoardLogger`` and the ``Logger`` base class."""

from fulmen.loggers.csv_logs import CSVLogger
from fulmen.loggers.logger import Logger
from fulmen.loggers.tensorboard import TensorBoardLogger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger"]

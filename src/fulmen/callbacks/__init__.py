"""Callbacks: ``Callback`` and the built-in ones."""

from fulmen.callbacks.batch_size_finder import BatchSizeFinder
from fulmen.callbacks.callback import Callback
from fulmen.callbacks.early_stopping import EarlyStopping
from fulmen.callbacks.gradient_accumulation_scheduler import GradientAccumulationScheduler
from fulmen.callbacks.lr_finder import LearningRateFinder
from fulmen.callbacks.lr_monitor import LearningRateMonitor
from fulmen.callbacks.model_checkpoint import Checkpoint, ModelCheckpoint
from fulmen.callbacks.model_summary import ModelSummary
from fulmen.callbacks.progress import ProgressBar, TQDMProgressBar
from fulmen.callbacks.stochastic_weight_avg import StochasticWeightAveraging
from fulmen.callbacks.timer import Timer

__all__ = [
    "BatchSizeFinder",
    "Callback",
    "Checkpoint",
    "EarlyStopping",
    "GradientAccumulationScheduler",
    "LearningRateFinder",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelSummary",
    "ProgressBar",
    "StochasticWeightAveraging",
    "TQDMProgressBar",
    "Timer",
]

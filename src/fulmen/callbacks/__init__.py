"""Callbacks: ``Callback`` and the built-in ones.

Each class is imported from its module when first used (``from fulmen.callbacks import ModelCheckpoint``
works as usual): importing ``fulmen.callbacks.callback`` for the base class then loads nothing else, so
the tuner, which some callbacks run, can itself define callbacks without an import cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.utilities.imports import lazy_exports

if TYPE_CHECKING:
    from fulmen.callbacks.batch_size_finder import BatchSizeFinder
    from fulmen.callbacks.checkpoint import Checkpoint
    from fulmen.callbacks.device_stats_monitor import DeviceStatsMonitor
    from fulmen.callbacks.early_stopping import EarlyStopping
    from fulmen.callbacks.finetuning import BackboneFinetuning, BaseFinetuning
    from fulmen.callbacks.global_batch_size import GlobalBatchSize
    from fulmen.callbacks.gradient_accumulation_scheduler import GradientAccumulationScheduler
    from fulmen.callbacks.lambda_function import LambdaCallback
    from fulmen.callbacks.lr_finder import LearningRateFinder
    from fulmen.callbacks.lr_monitor import LearningRateMonitor
    from fulmen.callbacks.model_checkpoint import ModelCheckpoint
    from fulmen.callbacks.model_summary import ModelSummary
    from fulmen.callbacks.on_exception_checkpoint import OnExceptionCheckpoint
    from fulmen.callbacks.prediction_writer import BasePredictionWriter, PredictionFileWriter
    from fulmen.callbacks.progress.progress_bar import ProgressBar
    from fulmen.callbacks.progress.rich_progress import RichProgressBar, RichProgressBarTheme
    from fulmen.callbacks.progress.tqdm_progress import TQDMProgressBar
    from fulmen.callbacks.pruning import ModelPruning
    from fulmen.callbacks.rich_model_summary import RichModelSummary
    from fulmen.callbacks.spike import SpikeDetection, TrainingSpikeException
    from fulmen.callbacks.stochastic_weight_avg import StochasticWeightAveraging
    from fulmen.callbacks.throughput_monitor import ThroughputMonitor
    from fulmen.callbacks.timer import Timer
    from fulmen.callbacks.weight_averaging import EMAWeightAveraging, WeightAveraging
    from fulmen.core.hooks import Callback

_WHERE = {
    "BackboneFinetuning": "finetuning",
    "BaseFinetuning": "finetuning",
    "BasePredictionWriter": "prediction_writer",
    "BatchSizeFinder": "batch_size_finder",
    "Callback": "callback",
    "Checkpoint": "checkpoint",
    "DeviceStatsMonitor": "device_stats_monitor",
    "EMAWeightAveraging": "weight_averaging",
    "EarlyStopping": "early_stopping",
    "GlobalBatchSize": "global_batch_size",
    "GradientAccumulationScheduler": "gradient_accumulation_scheduler",
    "LambdaCallback": "lambda_function",
    "LearningRateFinder": "lr_finder",
    "LearningRateMonitor": "lr_monitor",
    "ModelCheckpoint": "model_checkpoint",
    "ModelPruning": "pruning",
    "ModelSummary": "model_summary",
    "OnExceptionCheckpoint": "on_exception_checkpoint",
    "PredictionFileWriter": "prediction_writer",
    "ProgressBar": "progress.progress_bar",
    "RichModelSummary": "rich_model_summary",
    "RichProgressBar": "progress.rich_progress",
    "RichProgressBarTheme": "progress.rich_progress",
    "SpikeDetection": "spike",
    "StochasticWeightAveraging": "stochastic_weight_avg",
    "TQDMProgressBar": "progress.tqdm_progress",
    "ThroughputMonitor": "throughput_monitor",
    "Timer": "timer",
    "TrainingSpikeException": "spike",
    "WeightAveraging": "weight_averaging",
}

__getattr__, __dir__ = lazy_exports("fulmen.callbacks", _WHERE)


__all__ = [
    "BackboneFinetuning",
    "BaseFinetuning",
    "BasePredictionWriter",
    "BatchSizeFinder",
    "Callback",
    "Checkpoint",
    "DeviceStatsMonitor",
    "EMAWeightAveraging",
    "EarlyStopping",
    "GlobalBatchSize",
    "GradientAccumulationScheduler",
    "LambdaCallback",
    "LearningRateFinder",
    "LearningRateMonitor",
    "ModelCheckpoint",
    "ModelPruning",
    "ModelSummary",
    "OnExceptionCheckpoint",
    "PredictionFileWriter",
    "ProgressBar",
    "RichModelSummary",
    "RichProgressBar",
    "RichProgressBarTheme",
    "SpikeDetection",
    "StochasticWeightAveraging",
    "TQDMProgressBar",
    "ThroughputMonitor",
    "Timer",
    "TrainingSpikeException",
    "WeightAveraging",
]

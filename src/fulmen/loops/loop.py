"""``lightning.pytorch.loops.loop``: fulmen's loops share no base class. Each is a plain class that reads and
changes the run through one :class:`~fulmen.runtime.context.RunContext`: :class:`~fulmen.loops.fit.FitLoop`,
:class:`~fulmen.loops.training_epoch.TrainingEpochLoop`, :class:`~fulmen.loops.evaluation.EvaluationLoop` and
:class:`~fulmen.loops.evaluation.PredictionLoop`. Their checkpoint state is written and read by
:mod:`fulmen.loops.resume`."""

from fulmen.loops.evaluation import EvaluationLoop, PredictionLoop
from fulmen.loops.fit import FitLoop
from fulmen.loops.training_epoch import TrainingEpochLoop

__all__ = ["EvaluationLoop", "FitLoop", "PredictionLoop", "TrainingEpochLoop"]

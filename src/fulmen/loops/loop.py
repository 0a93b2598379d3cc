"""Lightning's import path ``lightning.pytorch.loops.loop``: fulmen's loops share no base class. Each is a
plain class that reads and changes the run through one :class:`~fulmen.runtime.context.RunContext`:
:class:`~fulmen.loops.fit_loop.FitLoop`, :class:`~fulmen.loops.training_epoch_loop.TrainingEpochLoop`,
:class:`~fulmen.loops.evaluation_loop.EvaluationLoop` and :class:`~fulmen.loops.evaluation_loop.PredictionLoop`. Their
checkpoint state is written and read by :mod:`fulmen.loops.resume`."""

from fulmen.loops.evaluation_loop import EvaluationLoop, PredictionLoop
from fulmen.loops.fit_loop import FitLoop
from fulmen.loops.training_epoch_loop import TrainingEpochLoop

__all__ = ["EvaluationLoop", "FitLoop", "PredictionLoop", "TrainingEpochLoop"]

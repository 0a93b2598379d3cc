"""The optimization step of a training batch: :mod:`.automatic` (the trainer steps the optimizers through a
closure) and :mod:`.manual` (training_step steps them); :mod:`.closure` holds the closure's base types."""

from fulmen.loops.optimization.automatic import AutomaticOptimization, Closure, ClosureResult
from fulmen.loops.optimization.closure import AbstractClosure, OutputResult
from fulmen.loops.optimization.manual import ManualOptimization, ManualResult

__all__ = [
    "AbstractClosure",
    "AutomaticOptimization",
    "Closure",
    "ClosureResult",
    "ManualOptimization",
    "ManualResult",
    "OutputResult",
]

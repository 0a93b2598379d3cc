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

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})

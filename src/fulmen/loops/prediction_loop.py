"""``lightning.pytorch.loops.prediction_loop``: ``trainer.predict`` runs
:class:`fulmen.loops.evaluation.PredictionLoop`."""

from fulmen.loops.evaluation import PredictionLoop

__all__ = ["PredictionLoop"]

# Lightning's name for this loop (its test suites and some programs import or patch it)
_PredictionLoop = PredictionLoop

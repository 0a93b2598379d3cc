"""``lightning.pytorch.loops.prediction_loop``: ``trainer.predict`` runs
:class:`fulmen.loops.evaluation.PredictionLoop`."""

from fulmen.loops.evaluation import PredictionLoop

__all__ = ["PredictionLoop"]

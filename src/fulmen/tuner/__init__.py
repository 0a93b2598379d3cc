"""The tuner: the batch-size finder and the learning-rate finder (``Tuner(trainer)``, ``trainer.tune``)."""

from fulmen.tuner.tuning import Tuner

__all__ = ["Tuner"]

"""``lightning.pytorch.plugins.precision.double``: the 64-bit precision object (``Trainer(precision='64-true')``)."""

from fulmen.precision import DoublePrecision

__all__ = ["DoublePrecision"]

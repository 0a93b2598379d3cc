"""``lightning.pytorch.plugins.precision.amp``: the mixed-precision object (``'16-mixed'`` / ``'bf16-mixed'``)."""

from fulmen.precision import MixedPrecision

__all__ = ["MixedPrecision"]

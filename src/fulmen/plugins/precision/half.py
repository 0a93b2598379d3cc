"""``lightning.pytorch.plugins.precision.half``: the 16-bit true-half precision object (``'16-true'`` / ``'bf16-true'``)."""

from fulmen.precision import HalfPrecision

__all__ = ["HalfPrecision"]

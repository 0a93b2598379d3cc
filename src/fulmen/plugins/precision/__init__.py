"""``lightning.pytorch.plugins.precision``: the precision objects, for ``Trainer(plugins=[...])``."""

from fulmen.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision

# the 1.x names of the same classes
PrecisionPlugin = Precision
MixedPrecisionPlugin = MixedPrecision
NativeMixedPrecisionPlugin = MixedPrecision
DoublePrecisionPlugin = DoublePrecision
HalfPrecisionPlugin = HalfPrecision

__all__ = [
    "DoublePrecision",
    "DoublePrecisionPlugin",
    "HalfPrecision",
    "HalfPrecisionPlugin",
    "MixedPrecision",
    "MixedPrecisionPlugin",
    "NativeMixedPrecisionPlugin",
    "Precision",
    "PrecisionPlugin",
]

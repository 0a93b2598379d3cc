"""``lightning.pytorch.plugins.precision.precision``: the precision base class."""

from fulmen.precision import Precision

__all__ = ["Precision"]

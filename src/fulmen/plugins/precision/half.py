"""Lightning's import path ``lightning.pytorch.plugins.precision.half``: the 16-bit true-half precision object
(``'16-true'`` / ``'bf16-true'``)."""

from fulmen.precision import HalfPrecision
from fulmen.precision import Precision as Precision
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases

__all__ = ["HalfPrecision"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "HalfPrecisionPlugin": "fulmen._graveyard.HalfPrecisionPlugin",
})  # fmt: skip

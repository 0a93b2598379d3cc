"""Lightning's import path ``lightning.pytorch.plugins.precision.amp``: the mixed-precision object
(``'16-mixed'`` / ``'bf16-mixed'``)."""

from fulmen.precision import MixedPrecision
from fulmen.precision import Precision as Precision
from fulmen.utilities.enums import GradClipAlgorithmType as GradClipAlgorithmType
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.types import Optimizable as Optimizable

__all__ = ["MixedPrecision"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "MixedPrecisionPlugin": "fulmen._graveyard.MixedPrecisionPlugin",
})  # fmt: skip

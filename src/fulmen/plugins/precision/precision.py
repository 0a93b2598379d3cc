"""Lightning's import path ``lightning.pytorch.plugins.precision.precision``: the precision base class."""

from fulmen.core.hooks import CheckpointHooks as CheckpointHooks
from fulmen.precision import Precision
from fulmen.utilities.enums import GradClipAlgorithmType as GradClipAlgorithmType
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.types import Steppable as Steppable

FabricPrecision = Precision  # Lightning Fabric's Precision, the base of Lightning's: fulmen's is the one base

__all__ = ["Precision"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "PrecisionPlugin": "fulmen._graveyard.PrecisionPlugin",
})  # fmt: skip

"""``lightning.pytorch.plugins.precision``: the precision objects, for ``Trainer(plugins=[...])``.

Those for hardware or packages fulmen does not run (DeepSpeed, XLA, TransformerEngine, bitsandbytes) load
only when asked for."""

from typing import TYPE_CHECKING

from fulmen.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision
from fulmen.utilities.imports import lazy_exports

if TYPE_CHECKING:
    from fulmen.plugins.precision.bitsandbytes import BitsandbytesPrecision
    from fulmen.plugins.precision.deepspeed import DeepSpeedPrecision
    from fulmen.plugins.precision.fsdp import FSDPPrecision
    from fulmen.plugins.precision.transformer_engine import TransformerEnginePrecision
    from fulmen.plugins.precision.xla import XLAPrecision

# the 1.x names of the same classes
PrecisionPlugin = Precision
MixedPrecisionPlugin = MixedPrecision
NativeMixedPrecisionPlugin = MixedPrecision
DoublePrecisionPlugin = DoublePrecision
HalfPrecisionPlugin = HalfPrecision

_WHERE = {
    "BitsandbytesPrecision": "bitsandbytes",
    "DeepSpeedPrecision": "deepspeed",
    "FSDPPrecision": "fsdp",
    "TransformerEnginePrecision": "transformer_engine",
    "XLAPrecision": "xla",
}

__getattr__, __dir__ = lazy_exports("fulmen.plugins.precision", _WHERE)

__all__ = [
    "BitsandbytesPrecision",
    "DeepSpeedPrecision",
    "DoublePrecision",
    "DoublePrecisionPlugin",
    "FSDPPrecision",
    "HalfPrecision",
    "HalfPrecisionPlugin",
    "MixedPrecision",
    "MixedPrecisionPlugin",
    "NativeMixedPrecisionPlugin",
    "Precision",
    "PrecisionPlugin",
    "TransformerEnginePrecision",
    "XLAPrecision",
]

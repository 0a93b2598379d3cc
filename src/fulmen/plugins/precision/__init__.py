"""Lightning's import path ``lightning.pytorch.plugins.precision``: the precision objects, for
``Trainer(plugins=[...])``.

Those for hardware or packages fulmen does not run (DeepSpeed, XLA, TransformerEngine, bitsandbytes) load
only when asked for."""

from typing import TYPE_CHECKING

from fulmen.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision
from fulmen.utilities.imports import lazy_aliases, lazy_exports

if TYPE_CHECKING:
    from fulmen.plugins.precision.bitsandbytes import BitsandbytesPrecision
    from fulmen.plugins.precision.deepspeed import DeepSpeedPrecision
    from fulmen.plugins.precision.fsdp import FSDPPrecision
    from fulmen.plugins.precision.transformer_engine import TransformerEnginePrecision
    from fulmen.plugins.precision.xla import XLAPrecision

_WHERE = {
    "BitsandbytesPrecision": "bitsandbytes",
    "DeepSpeedPrecision": "deepspeed",
    "FSDPPrecision": "fsdp",
    "TransformerEnginePrecision": "transformer_engine",
    "XLAPrecision": "xla",
}

__getattr__, __dir__ = lazy_exports("fulmen.plugins.precision", _WHERE)
# the names Lightning 2.x deprecated (subclasses that warn when made) or removed (they raise): see fulmen._graveyard
__getattr__ = lazy_aliases(__name__, {
    "BitsandbytesPrecisionPlugin": "fulmen._graveyard.BitsandbytesPrecisionPlugin",
    "DeepSpeedPrecisionPlugin": "fulmen._graveyard.DeepSpeedPrecisionPlugin",
    "DoublePrecisionPlugin": "fulmen._graveyard.DoublePrecisionPlugin",
    "FSDPMixedPrecisionPlugin": "fulmen._graveyard.FSDPMixedPrecisionPlugin",
    "FSDPPrecisionPlugin": "fulmen._graveyard.FSDPPrecisionPlugin",
    "HPUPrecisionPlugin": "fulmen._graveyard.HPUPrecisionPlugin",
    "HalfPrecisionPlugin": "fulmen._graveyard.HalfPrecisionPlugin",
    "MixedPrecisionPlugin": "fulmen._graveyard.MixedPrecisionPlugin",
    "NativeMixedPrecisionPlugin": "fulmen._graveyard.NativeMixedPrecisionPlugin",
    "PrecisionPlugin": "fulmen._graveyard.PrecisionPlugin",
    "TPUBf16PrecisionPlugin": "fulmen._graveyard.TPUBf16PrecisionPlugin",
    "TPUPrecisionPlugin": "fulmen._graveyard.TPUPrecisionPlugin",
    "TransformerEnginePrecisionPlugin": "fulmen._graveyard.TransformerEnginePrecisionPlugin",
    "XLABf16PrecisionPlugin": "fulmen._graveyard.XLABf16PrecisionPlugin",
    "XLAPrecisionPlugin": "fulmen._graveyard.XLAPrecisionPlugin",
}, fallback=__getattr__)  # fmt: skip

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

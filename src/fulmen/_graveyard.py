"""Names Lightning 2.x deprecated or removed, which Lightning 2.6.6 still holds, doing what Lightning does with them.

- the 1.x names of the precision plugins (``PrecisionPlugin``, ``MixedPrecisionPlugin``, ...) and the TPU
  classes (``TPUAccelerator``, ``SingleTPUStrategy``, ``TPUPrecisionPlugin``, ...) are subclasses of the current
  classes that warn, with a ``LightningDeprecationWarning`` naming the class to use, when one is made;
- the HPU classes Lightning removed (``HPUParallelStrategy``, ``SingleHPUStrategy``, ``HPUCheckpointIO``,
  ``HPUPrecisionPlugin``) raise ``NotImplementedError`` when made. fulmen's ``HPUAccelerator`` is no such class:
  ``Trainer(accelerator="hpu")`` trains on one Gaudi device with the single-device strategy.

Each name is where Lightning's is (``fulmen.plugins.MixedPrecisionPlugin``, ``fulmen.plugins.precision.amp.
MixedPrecisionPlugin``: one class), resolved from here on first use, so no run that does not name them loads this
module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.accelerators.xla import XLAAccelerator
from fulmen.plugins.precision.bitsandbytes import BitsandbytesPrecision
from fulmen.plugins.precision.deepspeed import DeepSpeedPrecision
from fulmen.plugins.precision.fsdp import FSDPPrecision
from fulmen.plugins.precision.transformer_engine import TransformerEnginePrecision
from fulmen.plugins.precision.xla import XLAPrecision
from fulmen.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision
from fulmen.strategies.single_xla import SingleDeviceXLAStrategy
from fulmen.utilities.rank_zero import rank_zero_deprecation

if TYPE_CHECKING:
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler


def _deprecated(name: str, new: type, where: str) -> type:
    """``name``, an old name of ``new``: a subclass taking ``new``'s arguments that warns when made."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        rank_zero_deprecation(f"The `{name}` is deprecated. Use `{where}.{new.__name__}` instead.")
        new.__init__(self, *args, **kwargs)  # type: ignore[misc]  # ``new``'s own, for this subclass made of it

    doc = f"Deprecated: the old name of :class:`{where}.{new.__name__}`, which it is (and warns when made)."
    return type(name, (new,), {"__init__": __init__, "__doc__": doc, "__module__": __name__})


_PRECISION = "fulmen.plugins.precision"
BitsandbytesPrecisionPlugin = _deprecated("BitsandbytesPrecisionPlugin", BitsandbytesPrecision, _PRECISION)
DeepSpeedPrecisionPlugin = _deprecated("DeepSpeedPrecisionPlugin", DeepSpeedPrecision, _PRECISION)
DoublePrecisionPlugin = _deprecated("DoublePrecisionPlugin", DoublePrecision, _PRECISION)
FSDPPrecisionPlugin = _deprecated("FSDPPrecisionPlugin", FSDPPrecision, _PRECISION)
HalfPrecisionPlugin = _deprecated("HalfPrecisionPlugin", HalfPrecision, _PRECISION)
MixedPrecisionPlugin = _deprecated("MixedPrecisionPlugin", MixedPrecision, _PRECISION)
NativeMixedPrecisionPlugin = _deprecated("NativeMixedPrecisionPlugin", MixedPrecision, _PRECISION)  # a 1.x name
PrecisionPlugin = _deprecated("PrecisionPlugin", Precision, _PRECISION)
TransformerEnginePrecisionPlugin = _deprecated("TransformerEnginePrecisionPlugin", TransformerEnginePrecision, _PRECISION)
XLAPrecisionPlugin = _deprecated("XLAPrecisionPlugin", XLAPrecision, _PRECISION)


class FSDPMixedPrecisionPlugin(FSDPPrecision):
    """Deprecated: :class:`fulmen.plugins.precision.FSDPPrecision` with the arguments of Lightning 1.x's FSDP
    mixed-precision plugin (``device`` is not used)."""

    def __init__(self, precision: str, device: str, scaler: ShardedGradScaler | None = None) -> None:
        rank_zero_deprecation(
            f"The `{type(self).__name__}` is deprecated. Use `fulmen.plugins.precision.FSDPPrecision` instead."
        )
        super().__init__(precision=precision, scaler=scaler)


class TPUAccelerator(XLAAccelerator):
    """Deprecated: :class:`fulmen.accelerators.XLAAccelerator`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        rank_zero_deprecation(
            "The `TPUAccelerator` class is deprecated. Use `fulmen.accelerators.XLAAccelerator` instead."
        )
        super().__init__(*args, **kwargs)


class SingleTPUStrategy(SingleDeviceXLAStrategy):
    """Deprecated: :class:`fulmen.strategies.SingleDeviceXLAStrategy` (``strategy="single_xla"``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        rank_zero_deprecation("The 'single_tpu' strategy is deprecated. Use 'single_xla' instead.")
        super().__init__(*args, **kwargs)


class _XLAPrecisionOf(XLAPrecision):
    """A 1.x TPU precision plugin: :class:`fulmen.plugins.precision.XLAPrecision` in one fixed precision (its
    arguments are not used)."""

    _precision = "32-true"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        rank_zero_deprecation(
            f"The `{type(self).__name__}` class is deprecated. Use `fulmen.plugins.precision.XLAPrecision` instead."
        )
        super().__init__(precision=self._precision)


class TPUPrecisionPlugin(_XLAPrecisionOf):
    """Deprecated: ``XLAPrecision("32-true")``."""


class TPUBf16PrecisionPlugin(_XLAPrecisionOf):
    """Deprecated: ``XLAPrecision("bf16-true")``."""

    _precision = "bf16-true"


class XLABf16PrecisionPlugin(_XLAPrecisionOf):
    """Deprecated: ``XLAPrecision("bf16-true")``."""

    _precision = "bf16-true"


class _Removed:
    """A class Lightning 2.x removed: making one raises ``NotImplementedError`` saying what to use."""

    instead = ""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(f"The `{type(self).__name__}` class has been removed (as in Lightning). {self.instead}")


_ONE_HPU = "Trainer(accelerator='hpu') trains on one Gaudi device, with the single-device strategy"


class HPUParallelStrategy(_Removed):
    instead = f"{_ONE_HPU}; several HPU devices are not supported."


class SingleHPUStrategy(_Removed):
    instead = f"{_ONE_HPU}."


class HPUCheckpointIO(_Removed):
    instead = f"{_ONE_HPU}, whose checkpoints the default TorchCheckpointIO writes."


class HPUPrecisionPlugin(_Removed):
    instead = f"{_ONE_HPU}, in the precision Trainer(precision=...) sets."

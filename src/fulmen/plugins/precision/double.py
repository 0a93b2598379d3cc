"""``lightning.pytorch.plugins.precision.double``: the 64-bit precision object (``Trainer(precision='64-true')``),
and ``LightningDoublePrecisionModule``, the deprecated wrapper that cast a module's inputs to float64."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.core.mixins import DeviceDtypeModuleMixin
from fulmen.precision import DoublePrecision
from fulmen.precision import Precision as Precision
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_deprecation

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule

_TO_DOUBLE = DoublePrecision()


class LightningDoublePrecisionModule(DeviceDtypeModuleMixin):
    """Wraps ``pl_module``: ``forward`` and the ``*_step`` methods get their floating-point tensors as float64.

    Deprecated (it warns when made): ``Trainer(precision='64-true')`` already casts every batch, and
    ``trainer.precision_plugin.convert_input(...)`` casts anything else. Parameters the module keeps out of
    DDP's synchronisation (``_ddp_params_and_buffers_to_ignore``) stay out under the wrapper's ``module.``
    prefix.
    """

    def __init__(self, pl_module: LightningModule) -> None:
        super().__init__()
        rank_zero_deprecation(
            f"`{type(self).__name__}` is deprecated and not needed: Trainer(precision='64-true') casts the batches "
            "already; cast other inputs with `trainer.precision_plugin.convert_input(...)`."
        )
        self.module = pl_module
        ignored = getattr(pl_module, "_ddp_params_and_buffers_to_ignore", [])
        self._ddp_params_and_buffers_to_ignore = [f"module.{name}" for name in ignored]

    @staticmethod
    def _to_double(args: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return _TO_DOUBLE.convert_input(args), _TO_DOUBLE.convert_input(kwargs)

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = self._to_double(args, kwargs)
        return self.module.training_step(*args, **kwargs)

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = self._to_double(args, kwargs)
        return self.module.validation_step(*args, **kwargs)

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = self._to_double(args, kwargs)
        return self.module.test_step(*args, **kwargs)

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = self._to_double(args, kwargs)
        return self.module.predict_step(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = self._to_double(args, kwargs)
        return self.module(*args, **kwargs)


__all__ = ["DoublePrecision", "LightningDoublePrecisionModule"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "DoublePrecisionPlugin": "fulmen._graveyard.DoublePrecisionPlugin",
})  # fmt: skip

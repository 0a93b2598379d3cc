"""Mixins of ``LightningModule`` and ``LightningDataModule``: hyperparameter storage (``HyperparametersMixin``)
and device / dtype tracking (``DeviceDtypeModuleMixin``)."""

from fulmen.core.mixins.device_dtype_mixin import DeviceDtypeModuleMixin
from fulmen.core.mixins.hparams_mixin import HyperparametersMixin

__all__ = ["DeviceDtypeModuleMixin", "HyperparametersMixin"]

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})

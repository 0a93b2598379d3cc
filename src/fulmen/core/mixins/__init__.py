"""Mixins of ``LightningModule`` and ``LightningDataModule``: hyperparameter storage (``HyperparametersMixin``)
and device / dtype tracking (``DeviceDtypeModuleMixin``)."""

from fulmen.core.mixins.device_dtype_mixin import DeviceDtypeModuleMixin
from fulmen.core.mixins.hparams_mixin import HyperparametersMixin

__all__ = ["DeviceDtypeModuleMixin", "HyperparametersMixin"]

"""Trainer plugins: ``Trainer(plugins=[...])``.

- a precision object, to set the precision with options the flag cannot carry, e.g.
  ``MixedPrecision("16-mixed", "cuda", scaler=torch.amp.GradScaler(init_scale=2.0**10))``;
- a ``CheckpointIO`` (``TorchCheckpointIO``, ``AsyncCheckpointIO``, or your own): how checkpoints are written,
  read and removed;
- a cluster environment (``SLURMEnvironment``, ``TorchElasticEnvironment``, ``LightningEnvironment``): which
  launcher's variables give the ranks (``fulmen.plugins.environments``).

Each class loads from its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.utilities.imports import lazy_exports

if TYPE_CHECKING:
    from fulmen.plugins.environments import (
        ClusterEnvironment,
        LightningEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )
    from fulmen.plugins.io import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO
    from fulmen.plugins.precision import (
        DoublePrecision,
        DoublePrecisionPlugin,
        HalfPrecision,
        HalfPrecisionPlugin,
        MixedPrecision,
        MixedPrecisionPlugin,
        NativeMixedPrecisionPlugin,
        Precision,
        PrecisionPlugin,
    )

_WHERE = {
    "AsyncCheckpointIO": "io",
    "CheckpointIO": "io",
    "ClusterEnvironment": "environments",
    "DoublePrecision": "precision",
    "DoublePrecisionPlugin": "precision",
    "HalfPrecision": "precision",
    "HalfPrecisionPlugin": "precision",
    "LightningEnvironment": "environments",
    "MixedPrecision": "precision",
    "MixedPrecisionPlugin": "precision",
    "NativeMixedPrecisionPlugin": "precision",
    "Precision": "precision",
    "PrecisionPlugin": "precision",
    "SLURMEnvironment": "environments",
    "TorchCheckpointIO": "io",
    "TorchElasticEnvironment": "environments",
}

__getattr__, __dir__ = lazy_exports("fulmen.plugins", _WHERE)


__all__ = [
    "AsyncCheckpointIO",
    "CheckpointIO",
    "ClusterEnvironment",
    "DoublePrecision",
    "DoublePrecisionPlugin",
    "HalfPrecision",
    "HalfPrecisionPlugin",
    "LightningEnvironment",
    "MixedPrecision",
    "MixedPrecisionPlugin",
    "NativeMixedPrecisionPlugin",
    "Precision",
    "PrecisionPlugin",
    "SLURMEnvironment",
    "TorchCheckpointIO",
    "TorchElasticEnvironment",
]

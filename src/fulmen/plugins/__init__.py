"""Trainer plugins: ``Trainer(plugins=[...])``.

- a precision object, to set the precision with options the flag cannot carry, e.g.
  ``MixedPrecision("16-mixed", "cuda", scaler=torch.amp.GradScaler(init_scale=2.0**10))``;
- a ``CheckpointIO`` (``TorchCheckpointIO``, ``AsyncCheckpointIO``, or your own): how checkpoints are written,
  read and removed;
- a cluster environment (``SLURMEnvironment``, ``TorchElasticEnvironment``, ``LightningEnvironment``,
  ``KubeflowEnvironment``, ``LSFEnvironment``, ``MPIEnvironment``): which launcher's variables give the ranks
  (``fulmen.plugins.environments``);
- a ``LayerSync`` (``TorchSyncBatchNorm``, what ``sync_batchnorm=True`` means, or your own): which layers
  synchronise across processes.

Lightning's own objects of these kinds (a Lightning Fabric ``CheckpointIO`` or cluster environment, e.g. from a
library written for Lightning) are accepted as well.

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
    from fulmen.plugins.io import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO, XLACheckpointIO
    from fulmen.plugins.layer_sync import LayerSync, TorchSyncBatchNorm
    from fulmen.plugins.precision import (
        BitsandbytesPrecision,
        DeepSpeedPrecision,
        DoublePrecision,
        DoublePrecisionPlugin,
        FSDPPrecision,
        HalfPrecision,
        HalfPrecisionPlugin,
        MixedPrecision,
        MixedPrecisionPlugin,
        NativeMixedPrecisionPlugin,
        Precision,
        PrecisionPlugin,
        TransformerEnginePrecision,
        XLAPrecision,
    )

_WHERE = {
    "AsyncCheckpointIO": "io",
    "BitsandbytesPrecision": "precision",
    "DeepSpeedPrecision": "precision",
    "FSDPPrecision": "precision",
    "LayerSync": "layer_sync",
    "TorchSyncBatchNorm": "layer_sync",
    "TransformerEnginePrecision": "precision",
    "XLACheckpointIO": "io",
    "XLAPrecision": "precision",
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
    # the names Lightning 2.x deprecated (subclasses that warn when made) or removed (they raise): see
    # fulmen._graveyard
    "BitsandbytesPrecisionPlugin": "precision",
    "DeepSpeedPrecisionPlugin": "precision",
    "FSDPMixedPrecisionPlugin": "precision",
    "FSDPPrecisionPlugin": "precision",
    "HPUCheckpointIO": "io",
    "HPUPrecisionPlugin": "precision",
    "TPUBf16PrecisionPlugin": "precision",
    "TPUPrecisionPlugin": "precision",
    "TransformerEnginePrecisionPlugin": "precision",
    "XLABf16PrecisionPlugin": "precision",
    "XLAPrecisionPlugin": "precision",
}

__getattr__, __dir__ = lazy_exports("fulmen.plugins", _WHERE)


__all__ = [
    "AsyncCheckpointIO",
    "BitsandbytesPrecision",
    "CheckpointIO",
    "ClusterEnvironment",
    "DeepSpeedPrecision",
    "DoublePrecision",
    "DoublePrecisionPlugin",
    "FSDPPrecision",
    "HalfPrecision",
    "HalfPrecisionPlugin",
    "LayerSync",
    "LightningEnvironment",
    "MixedPrecision",
    "MixedPrecisionPlugin",
    "NativeMixedPrecisionPlugin",
    "Precision",
    "PrecisionPlugin",
    "SLURMEnvironment",
    "TorchCheckpointIO",
    "TorchElasticEnvironment",
    "TorchSyncBatchNorm",
    "TransformerEnginePrecision",
    "XLACheckpointIO",
    "XLAPrecision",
]

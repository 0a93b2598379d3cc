"""Trainer plugins: ``Trainer(plugins=[...])``.

- a precision object, to set the precision with options the flag cannot carry, e.g.
  ``MixedPrecision("16-mixed", "cuda", scaler=torch.amp.GradScaler(init_scale=2.0**10))``;
- a ``CheckpointIO`` (``TorchCheckpointIO``, ``AsyncCheckpointIO``, or your own): how checkpoints are written,
  read and removed;
- a cluster environment (``SLURMEnvironment``, ``TorchElasticEnvironment``, ``LightningEnvironment``): which
  launcher's variables give the ranks (``fulmen.plugins.environments``).
"""

from fulmen.plugins.environments import (
    ClusterEnvironment,
    LightningEnvironment,
    SLURMEnvironment,
    TorchElasticEnvironment,
)
from fulmen.plugins.io import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO
from fulmen.plugins.precision import *  # noqa: F403 - re-exported
from fulmen.plugins.precision import __all__ as _precision_names

__all__ = [
    "AsyncCheckpointIO", "CheckpointIO", "ClusterEnvironment", "LightningEnvironment", "SLURMEnvironment",
    "TorchCheckpointIO", "TorchElasticEnvironment", *_precision_names,
]  # fmt: skip

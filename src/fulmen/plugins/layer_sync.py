"""Layer synchronisation plugins: which layers of a model share statistics across processes.

``Trainer(sync_batchnorm=True)`` is ``Trainer(plugins=[TorchSyncBatchNorm()])``: under a multi-process strategy
(DDP, FSDP) every BatchNorm layer becomes a ``torch.nn.SyncBatchNorm`` when fitting starts, so its batch
statistics are those of the global batch, and turns back into a plain BatchNorm when fitting ends. A
``LayerSync`` of your own (``apply`` / ``revert``) passed in ``plugins`` is used the same way, e.g. to sync
within groups of processes only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn

from fulmen.plugins._interop import implements_foreign_base


class LayerSync(ABC):
    """Converts a model's layers to synchronised ones (``apply``) and back (``revert``).

    Both change the model in place where they can and return it: the strategy keeps using the module it
    returns. A subclass of Lightning's ``LayerSync`` counts as one (``isinstance`` is true for it).
    """

    @abstractmethod
    def apply(self, model: nn.Module) -> nn.Module:
        """Make the layers of ``model`` synchronise across processes; return the model."""

    @abstractmethod
    def revert(self, model: nn.Module) -> nn.Module:
        """Undo :meth:`apply`; return the model."""

    @classmethod
    def __subclasshook__(cls, subclass: type) -> bool:
        if cls is LayerSync and implements_foreign_base(subclass, "LayerSync", ("apply", "revert")):
            return True
        return NotImplemented


class TorchSyncBatchNorm(LayerSync):
    """Every BatchNorm layer as ``torch.nn.SyncBatchNorm`` (statistics over all processes). It only matters
    with several processes; torch runs SyncBatchNorm on GPUs."""

    def apply(self, model: nn.Module) -> nn.Module:
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)

    def revert(self, model: nn.Module) -> nn.Module:
        """Each ``SyncBatchNorm`` back to a BatchNorm that keeps its parameters (the same tensors, so optimizers
        still hold them), running statistics and mode. The layer's original class (1d, 2d or 3d) is not
        recorded by ``apply``, so it becomes a BatchNorm that accepts any number of dimensions."""
        result = _plain_batchnorm(model) if isinstance(model, nn.SyncBatchNorm) else model
        for name, child in model.named_children():
            result.add_module(name, self.revert(child))
        return result


class _BatchNormXd(nn.modules.batchnorm._BatchNorm):
    """A BatchNorm for inputs of any dimension (what a reverted SyncBatchNorm becomes)."""

    def _check_input_dim(self, input: Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"BatchNorm expects an input of at least 2 dimensions (N, C, ...), got {input.dim()}D.")


def _plain_batchnorm(sync: nn.SyncBatchNorm) -> nn.Module:
    plain = _BatchNormXd(sync.num_features, sync.eps, sync.momentum, sync.affine, sync.track_running_stats)
    with torch.no_grad():
        if sync.affine:
            plain.weight, plain.bias = sync.weight, sync.bias
        plain.running_mean, plain.running_var = sync.running_mean, sync.running_var
        plain.num_batches_tracked = sync.num_batches_tracked
    plain.train(sync.training)
    if hasattr(sync, "qconfig"):  # quantisation-aware training keeps its configuration
        plain.qconfig = sync.qconfig
    return plain


__all__ = ["LayerSync", "TorchSyncBatchNorm"]

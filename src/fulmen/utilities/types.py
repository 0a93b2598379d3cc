"""Type aliases user code annotates with (``lightning.pytorch.utilities.types``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Union

from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

STEP_OUTPUT = Union[Tensor, Mapping[str, Any], None]
"""What a step may return: a loss tensor, a dict (with "loss" in training), or None."""
TRAIN_DATALOADERS = Any
"""A dataloader, or a collection (list, dict) of them, for training."""
EVAL_DATALOADERS = Any
"""A dataloader or a sequence of them, for validation / test / predict."""
LRSchedulerTypeUnion = Union[LRScheduler, ReduceLROnPlateau]
LRSchedulerTypeTuple = (LRScheduler, ReduceLROnPlateau)
LRSchedulerPLType = LRSchedulerTypeUnion
LRSchedulerConfigType = dict[str, Any]
OptimizerLRScheduler = Union[
    Optimizer, Sequence[Optimizer], tuple[Sequence[Optimizer], Sequence[Any]], Mapping[str, Any], Sequence[Mapping[str, Any]], None
]
"""What ``configure_optimizers`` may return."""

__all__ = [
    "EVAL_DATALOADERS",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
    "LRSchedulerConfigType",
    "LRSchedulerPLType",
    "LRSchedulerTypeTuple",
    "LRSchedulerTypeUnion",
    "OptimizerLRScheduler",
]  # fmt: skip

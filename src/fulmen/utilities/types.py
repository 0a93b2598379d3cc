"""Type aliases user code annotates with (``lightning.pytorch.utilities.types``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass
class LRSchedulerConfig:
    """How and when one learning-rate scheduler is stepped (Lightning's scheduler dict, as an object).
    ``opt_idx`` (the 1.x optimizer index, derived from the scheduler's optimizer) is not compared."""

    scheduler: Any
    name: str | None = None
    interval: str = "epoch"
    frequency: int = 1
    reduce_on_plateau: bool = False
    monitor: str | None = None
    strict: bool = True
    opt_idx: int | None = field(default=None, repr=False, compare=False)

__all__ = [
    "EVAL_DATALOADERS",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
    "LRSchedulerConfig",
    "LRSchedulerConfigType",
    "LRSchedulerPLType",
    "LRSchedulerTypeTuple",
    "LRSchedulerTypeUnion",
    "OptimizerLRScheduler",
]  # fmt: skip

"""Type aliases user code annotates with (``lightning.pytorch.utilities.types``).

No ``from __future__ import annotations`` here: the TypedDicts must see ``Required`` / ``NotRequired`` as objects,
which string annotations hide from them.
"""

import sys
from collections.abc import Generator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, Union, runtime_checkable

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

if sys.version_info >= (3, 11):
    from typing import NotRequired, Required, TypedDict
else:  # a dependency of torch
    from typing_extensions import NotRequired, Required, TypedDict

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

STEP_OUTPUT = Union[Tensor, Mapping[str, Any], None]
"""What a step may return: a loss tensor, a dict (with "loss" in training), or None."""
TRAIN_DATALOADERS = Any
"""A dataloader, or a collection (list, dict) of them, for training."""
EVAL_DATALOADERS = Any
"""A dataloader or a sequence of them, for validation / test / predict."""
LRSchedulerTypeUnion = Union[LRScheduler, ReduceLROnPlateau]
LRSchedulerTypeTuple = (LRScheduler, ReduceLROnPlateau)
LRSchedulerType = Union[type[LRScheduler], type[ReduceLROnPlateau]]
LRSchedulerPLType = LRSchedulerTypeUnion


@runtime_checkable
class DistributedDataParallel(Protocol):
    """What fulmen needs of a DDP wrapper (``torch.nn.parallel.DistributedDataParallel`` or a look-alike): built
    from a module with DDP's arguments, and ``no_sync()`` to skip the gradient all-reduce while accumulating."""

    def __init__(
        self,
        module: torch.nn.Module,
        device_ids: list[int | torch.device] | None = None,
        output_device: int | torch.device | None = None,
        dim: int = 0,
        broadcast_buffers: bool = True,
        process_group: "ProcessGroup | None" = None,
        bucket_cap_mb: int = 25,
        find_unused_parameters: bool = False,
        check_reduction: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
    ) -> None: ...

    @contextmanager
    def no_sync(self) -> Generator[None, None, None]: ...


@runtime_checkable
class Steppable(Protocol):
    """Anything with ``step(closure=None)``, as an optimizer has (Lightning Fabric's structural type)."""

    def step(self, closure: Any = ...) -> Any: ...


@runtime_checkable
class Optimizable(Steppable, Protocol):
    """What an optimizer is, structurally: ``step``, ``param_groups``, ``defaults``, ``state`` and its state dict
    (``isinstance(torch.optim.SGD(...), Optimizable)`` holds; Lightning Fabric's structural type)."""

    param_groups: list[dict[Any, Any]]
    defaults: dict[Any, Any]
    state: dict[Any, Any]

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


class LRSchedulerConfigType(TypedDict, total=False):
    """A scheduler dict in ``configure_optimizers``' return: only ``scheduler`` is required."""

    scheduler: Required[LRSchedulerTypeUnion]
    name: str | None
    interval: str
    frequency: int
    reduce_on_plateau: bool
    monitor: str | None
    strict: bool


class OptimizerConfig(TypedDict):
    """``{"optimizer": optimizer}`` from ``configure_optimizers``."""

    optimizer: Optimizer


class OptimizerLRSchedulerConfig(TypedDict):
    """``{"optimizer": ..., "lr_scheduler": a scheduler or scheduler dict, "monitor": a metric name (optional)}``."""

    optimizer: Optimizer
    lr_scheduler: LRSchedulerTypeUnion | LRSchedulerConfigType
    monitor: NotRequired[str]


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


OptimizerLRScheduler = Union[
    Optimizer,
    Sequence[Optimizer],
    tuple[Sequence[Optimizer], Sequence[Union[LRSchedulerTypeUnion, LRSchedulerConfig]]],
    OptimizerConfig,
    OptimizerLRSchedulerConfig,
    Sequence[OptimizerConfig],
    Sequence[OptimizerLRSchedulerConfig],
    None,
]
"""What ``configure_optimizers`` may return."""

__all__ = [
    "EVAL_DATALOADERS",
    "STEP_OUTPUT",
    "TRAIN_DATALOADERS",
    "DistributedDataParallel",
    "LRSchedulerConfig",
    "LRSchedulerConfigType",
    "LRSchedulerPLType",
    "LRSchedulerType",
    "LRSchedulerTypeTuple",
    "LRSchedulerTypeUnion",
    "OptimizerConfig",
    "OptimizerLRScheduler",
    "OptimizerLRSchedulerConfig",
]  # fmt: skip

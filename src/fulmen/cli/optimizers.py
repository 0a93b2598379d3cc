"""The optimizer and learning-rate scheduler types the command line takes (``--optimizer``, ``--lr_scheduler``,
model arguments typed ``OptimizerCallable`` / ``LRSchedulerCallable``), and their parsed values as class-path
dicts."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Union

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler


class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """torch's ``ReduceLROnPlateau`` that also names the metric it watches, so that
    ``--lr_scheduler=ReduceLROnPlateau --lr_scheduler.monitor=val_loss`` is complete on the command line."""

    def __init__(self, optimizer: Optimizer, monitor: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(optimizer, *args, **kwargs)
        self.monitor = monitor


# the public name (what configs, pickles and messages show, as when the class was defined in fulmen.cli itself):
# `fulmen.cli` re-exports it, so the name imports
ReduceLROnPlateau.__module__ = "fulmen.cli"

# types for model arguments the CLI fills: `optimizer: OptimizerCallable = torch.optim.Adam` takes
# `--model.optimizer=SGD --model.optimizer.lr=0.1` and is called with the parameters in configure_optimizers
LRSchedulerTypeTuple = (LRScheduler, ReduceLROnPlateau)
LRSchedulerTypeUnion = Union[LRScheduler, ReduceLROnPlateau]
LRSchedulerType = Union[type[LRScheduler], type[ReduceLROnPlateau]]
OptimizerCallable = Callable[[Iterable], Optimizer]
LRSchedulerCallable = Callable[[Optimizer], Union[LRScheduler, ReduceLROnPlateau]]


def _class_path_config(class_type: Any, value: Any) -> dict[str, Any] | None:
    """An optimizer / scheduler group's parsed value as ``{"class_path": ..., "init_args": {...}}``."""
    if value is None:
        return None
    data = value.as_dict() if hasattr(value, "as_dict") else dict(value)
    if "class_path" in data:
        return {"class_path": data["class_path"], "init_args": dict(data.get("init_args") or {})}
    return {"class_path": f"{class_type.__module__}.{class_type.__qualname__}", "init_args": data}

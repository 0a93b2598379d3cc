"""Apply a function to every tensor inside nested collections (moving batches between devices)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch


def apply_to_collection(data: Any, dtype: type | tuple[type, ...], function: Callable[..., Any]) -> Any:
    """Return ``data`` with ``function`` applied to every element of type ``dtype``, structure kept."""
    if isinstance(data, dtype):
        return function(data)
    if isinstance(data, Mapping):
        return type(data)({k: apply_to_collection(v, dtype, function) for k, v in data.items()})  # type: ignore[call-arg]
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(apply_to_collection(v, dtype, function) for v in data))
    if isinstance(data, (list, tuple)):
        return type(data)(apply_to_collection(v, dtype, function) for v in data)
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        changes = {
            f.name: apply_to_collection(getattr(data, f.name), dtype, function)
            for f in dataclasses.fields(data)
            if f.init
        }
        return dataclasses.replace(data, **changes)
    return data


_CPU = torch.device("cpu")


def move_data_to_device(batch: Any, device: torch.device | str | int) -> Any:
    """Move every tensor (or object with ``.to``) in ``batch`` to ``device``.

    ``non_blocking`` is used for CUDA targets so the copy overlaps compute: the host does not wait.
    """
    if isinstance(device, str):
        device = torch.device(device)
    # ``device == _CPU``: a C-level comparison; reading ``device.type`` costs ten times more, per batch
    if type(batch) in (tuple, list) and device == _CPU and _all_cpu_tensors(batch):
        return batch  # nothing to move: the common case on a CPU, answered without building a new batch
    non_blocking = isinstance(device, torch.device) and device.type == "cuda"
    on_cpu = isinstance(device, torch.device) and device.type == "cpu"

    def to(t: torch.Tensor) -> torch.Tensor:
        # ``t.is_cpu`` answers without building a torch.device per tensor (per batch, in the hot loop)
        if t.is_cpu if on_cpu else t.device == device:
            return t
        return t.to(device, non_blocking=non_blocking)

    if isinstance(batch, torch.Tensor):
        return to(batch)
    if type(batch) in (list, tuple) and all(type(t) is torch.Tensor for t in batch):  # the common case, fast
        return type(batch)(to(t) for t in batch)

    def move_any(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return to(x)
        moved = x.to(device)
        return x if moved is None else moved

    return apply_to_collection(batch, _Movable, move_any)


def _all_cpu_tensors(batch: tuple[Any, ...] | list[Any]) -> bool:
    for item in batch:  # noqa: SIM110 - a plain loop: all() over a generator costs a frame per batch
        if type(item) is not torch.Tensor or not item.is_cpu:
            return False
    return True


class _MovableMeta(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor) or (
            callable(getattr(obj, "to", None))
            and not isinstance(obj, (type, Sequence, Mapping, torch.nn.Module))
        )


class _Movable(metaclass=_MovableMeta):
    """Matches tensors and objects exposing ``.to(device)``."""

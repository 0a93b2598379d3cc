"""Apply a function to every tensor inside nested collections (moving batches between devices)."""

from __future__ import annotations

import dataclasses
import sys
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch


def apply_to_collection(
    data: Any,
    dtype: type | tuple[type, ...],
    function: Callable[..., Any],
    *args: Any,
    wrong_dtype: type | tuple[type, ...] | None = None,
    include_none: bool = True,
    allow_frozen: bool = False,
    **kwargs: Any,
) -> Any:
    """Return ``data`` with ``function(element, *args, **kwargs)`` applied to every element of type ``dtype`` (not
    of ``wrong_dtype``), structure kept: mappings (a ``defaultdict`` keeps its factory), named tuples, lists,
    tuples and dataclass instances. ``include_none=False`` leaves out the entries of mappings and sequences
    whose result is None (a dataclass field keeps its value). A frozen dataclass is rebuilt with
    ``dataclasses.replace``, so ``allow_frozen`` (Lightning's switch for letting one pass) refuses nothing here."""
    if isinstance(data, dtype) and (wrong_dtype is None or not isinstance(data, wrong_dtype)):
        return function(data, *args, **kwargs)
    if not isinstance(data, (Mapping, list, tuple)) and not dataclasses.is_dataclass(data):
        return data  # a leaf of another type: the common case, answered first

    def apply(value: Any) -> Any:
        return apply_to_collection(value, dtype, function, *args, wrong_dtype=wrong_dtype,
                                   include_none=include_none, **kwargs)  # fmt: skip

    if isinstance(data, Mapping):
        items = [(k, apply(v)) for k, v in data.items()]
        if not include_none:
            items = [(k, v) for k, v in items if v is not None]
        if isinstance(data, defaultdict):
            return type(data)(data.default_factory, items)
        return type(data)(dict(items))  # type: ignore[call-arg]
    if isinstance(data, (list, tuple)):
        results = [apply(v) for v in data]
        if not include_none:
            results = [v for v in results if v is not None]
        if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
            return type(data)(*results)
        return type(data)(results)
    if not isinstance(data, type):  # a dataclass instance
        changes = {}
        for f in dataclasses.fields(data):
            if f.init:
                value = apply(getattr(data, f.name))
                changes[f.name] = getattr(data, f.name) if value is None and not include_none else value
        return dataclasses.replace(data, **changes)
    return data


def is_dataclass_instance(obj: object) -> bool:
    """Whether ``obj`` is an instance of a dataclass (not a dataclass itself)."""
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type)


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


def _to_tensor(value: Any, device: torch.device | str | int) -> torch.Tensor:
    if isinstance(value, bool):  # before int: a bool is an int too
        return torch.tensor(value, dtype=torch.uint8, device=device)
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int32, device=device)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float32, device=device)
    return torch.from_numpy(value).to(device)  # a numpy array: its own dtype


def convert_to_tensors(data: Any, device: torch.device | str | int) -> Any:
    """``data`` with every Python ``bool``, ``int`` and ``float`` made a tensor on ``device`` (``uint8``, ``int32``,
    ``float32``), every numpy array a tensor of its dtype, and every tensor moved to ``device``; the collections
    keep their structure (Lightning Fabric's ``convert_to_tensors``)."""
    numpy = sys.modules.get("numpy")  # without numpy imported, no value can be an array: nothing to import
    kinds: tuple[type, ...] = (bool, int, float) + ((numpy.ndarray,) if numpy is not None else ())
    return move_data_to_device(apply_to_collection(data, kinds, lambda value: _to_tensor(value, device)), device)


def convert_tensors_to_scalars(data: Any) -> Any:
    """``data`` with every one-element tensor replaced by its Python number (``.item()``); ``ValueError`` for a
    tensor of several elements (Lightning Fabric's ``convert_tensors_to_scalars``, what loggers receive)."""

    def item(tensor: torch.Tensor) -> int | float | bool:
        if tensor.numel() != 1:
            raise ValueError(
                f"The metric `{tensor}` does not contain a single element, thus it cannot be converted to a scalar: "
                "reduce it first (e.g. `.mean()`) or log its elements one by one."
            )
        return tensor.item()

    return apply_to_collection(data, torch.Tensor, item)

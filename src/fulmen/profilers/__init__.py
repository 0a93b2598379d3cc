"""Profilers: ``Trainer(profiler="simple" | "advanced" | "pytorch" | Profiler)``.

The Trainer records every hook and loop stage through its hook dispatcher; with ``profiler=None`` nothing is
recorded and the hot loop runs exactly as without this package. Each class loads on first use."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fulmen.profilers.advanced import AdvancedProfiler
    from fulmen.profilers.profiler import PassThroughProfiler, Profiler
    from fulmen.profilers.pytorch import PyTorchProfiler
    from fulmen.profilers.simple import SimpleProfiler

_WHERE = {
    "AdvancedProfiler": "advanced",
    "PassThroughProfiler": "profiler",
    "Profiler": "profiler",
    "PyTorchProfiler": "pytorch",
    "SimpleProfiler": "simple",
}


def __getattr__(name: str) -> object:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fulmen.profilers' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fulmen.profilers.{module}"), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "AdvancedProfiler",
    "PassThroughProfiler",
    "Profiler",
    "PyTorchProfiler",
    "SimpleProfiler",
]

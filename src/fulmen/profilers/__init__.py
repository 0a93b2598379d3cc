"""Profilers: ``Trainer(profiler="simple" | "advanced" | "pytorch" | Profiler)``.

The Trainer records every hook and loop stage through its hook dispatcher; with ``profiler=None`` nothing is
recorded and the hot loop runs exactly as without this package. Each class loads on first use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.utilities.imports import lazy_exports

if TYPE_CHECKING:
    from fulmen.profilers.advanced import AdvancedProfiler
    from fulmen.profilers.base import PassThroughProfiler
    from fulmen.profilers.profiler import Profiler
    from fulmen.profilers.pytorch import PyTorchProfiler
    from fulmen.profilers.simple import SimpleProfiler
    from fulmen.profilers.xla import XLAProfiler

_WHERE = {
    "AdvancedProfiler": "advanced",
    "PassThroughProfiler": "base",
    "Profiler": "profiler",
    "PyTorchProfiler": "pytorch",
    "SimpleProfiler": "simple",
    "XLAProfiler": "xla",
}

__getattr__, __dir__ = lazy_exports("fulmen.profilers", _WHERE)


__all__ = [
    "AdvancedProfiler",
    "PassThroughProfiler",
    "Profiler",
    "PyTorchProfiler",
    "SimpleProfiler",
    "XLAProfiler",
]

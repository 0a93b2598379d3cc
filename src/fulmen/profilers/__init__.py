"""Profilers: ``Trainer(profiler="simple" | "advanced" | "pytorch" | Profiler)``.

The Trainer records every hook and loop stage through its hook dispatcher; with ``profiler=None`` nothing is
recorded and the hot loop runs exactly as without this package.
"""

from fulmen.profilers.advanced import AdvancedProfiler
from fulmen.profilers.profiler import PassThroughProfiler, Profiler
from fulmen.profilers.pytorch import PyTorchProfiler
from fulmen.profilers.simple import SimpleProfiler

__all__ = ["AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler"]

"""``PassThroughProfiler``: the profiler of ``Trainer(profiler=None)``, which records nothing."""

from __future__ import annotations

from fulmen.profilers.profiler import Profiler


class PassThroughProfiler(Profiler):
    """Records nothing: ``Trainer(profiler=PassThroughProfiler())`` behaves as ``profiler=None`` (the Trainer
    then does not time its hooks at all)."""

    def start(self, action_name: str) -> None:
        pass

    def stop(self, action_name: str) -> None:
        pass


__all__ = ["PassThroughProfiler"]

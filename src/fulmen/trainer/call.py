"""``lightning.pytorch.trainer.call``: every callback, module, data-module and strategy hook is called through
one dispatcher, :class:`fulmen.runtime.hooks.HookDispatcher` (:class:`~fulmen.runtime.hooks.
ProfilingHookDispatcher` with a profiler); a stage's set-up, teardown and interrupt handling (Ctrl-C, a
failure: callbacks' ``on_exception``, loggers finalised) are :class:`fulmen.trainer.runner.StageRunner`."""

from fulmen.runtime.hooks import HookDispatcher, ProfilingHookDispatcher
from fulmen.trainer.runner import StageRunner

__all__ = ["HookDispatcher", "ProfilingHookDispatcher", "StageRunner"]

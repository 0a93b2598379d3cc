"""Launchers: how the processes of a run are started (the script again, torch.multiprocessing, torch_xla)."""

from fulmen.strategies.launchers.multiprocessing import _MultiProcessingLauncher
from fulmen.strategies.launchers.subprocess_script import _SubprocessScriptLauncher
from fulmen.strategies.launchers.xla import _XLALauncher

__all__ = ["_MultiProcessingLauncher", "_SubprocessScriptLauncher", "_XLALauncher"]

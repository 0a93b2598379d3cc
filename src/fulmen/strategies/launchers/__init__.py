"""Launchers: how the processes of a run are started (the script again, torch.multiprocessing, torch_xla)."""

from fulmen.strategies.launchers.multiprocessing import _MultiProcessingLauncher
from fulmen.strategies.launchers.subprocess_script import _SubprocessScriptLauncher
from fulmen.strategies.launchers.xla import _XLALauncher

__all__ = ["_MultiProcessingLauncher", "_SubprocessScriptLauncher", "_XLALauncher"]

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})

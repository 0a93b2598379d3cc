"""Lightning's import path ``lightning.pytorch.trainer.call``: every callback, module, data-module and
strategy hook is called through one dispatcher, :class:`fulmen.runtime.hooks.HookDispatcher`
(:class:`~fulmen.runtime.hooks.ProfilingHookDispatcher` with a profiler); a stage's set-up, teardown and
interrupt handling (Ctrl-C, a failure: callbacks' ``on_exception``, loggers finalised) are
:class:`fulmen.trainer.runner.StageRunner`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fulmen.runtime.hooks import HookDispatcher, ProfilingHookDispatcher
from fulmen.runtime.state import TrainerStatus as TrainerStatus
from fulmen.trainer.runner import StageRunner
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer

__all__ = ["HookDispatcher", "ProfilingHookDispatcher", "StageRunner"]


def _call_and_handle_interrupt(trainer: Trainer, trainer_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run the stage ``trainer_fn(*args, **kwargs)`` in the processes the strategy's launcher starts for it, or
    in this one; the stage handles its interrupts itself (Ctrl-C, a signal, a failure: see
    :class:`~fulmen.trainer.runner.StageRunner`). ``fit`` / ``validate`` / ``test`` / ``predict`` call it as this
    module's name, so patching it (as Lightning's tests do) replaces the run."""
    return trainer.strategy.launch(trainer, functools.partial(trainer_fn, **kwargs) if kwargs else trainer_fn, *args)


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "Checkpoint": "fulmen.callbacks.checkpoint.Checkpoint",
    "EarlyStopping": "fulmen.callbacks.early_stopping.EarlyStopping",
    "WandbLogger": "fulmen.loggers.wandb.WandbLogger",
})  # fmt: skip

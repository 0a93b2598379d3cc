"""Lightning's import path ``lightning.pytorch.trainer.setup``: the Trainer's flags (debugging flags, batch
limits, the profiler) are parsed and checked once by :func:`fulmen.trainer.flags.parse_flags` into a
:class:`~fulmen.trainer.flags. TrainerConfig`; :func:`prepare_model` readies the model a stage runs."""

from __future__ import annotations

from typing import Any

import torch

from fulmen.accelerators.cuda import CUDAAccelerator as CUDAAccelerator
from fulmen.accelerators.mps import MPSAccelerator as MPSAccelerator
from fulmen.accelerators.xla import XLAAccelerator as XLAAccelerator
from fulmen.core.module import LightningModule, unwrap_compiled
from fulmen.trainer.flags import TrainerConfig, parse_flags
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning as PossibleUserWarning

__all__ = ["TrainerConfig", "parse_flags", "prepare_model"]


def prepare_model(model: Any, compile_options: bool | dict[str, Any], fn: str) -> LightningModule:
    """The LightningModule a stage runs: ``Trainer(compile=...)`` applied (as if the user had passed
    ``torch.compile(model, **options)``), a compiled module unwrapped, anything else refused."""
    if compile_options is not False and isinstance(model, LightningModule) and model._compiled_from is None:
        options = compile_options if isinstance(compile_options, dict) else {}
        model = unwrap_compiled(torch.compile(model, **options))
    model = unwrap_compiled(model)
    if not isinstance(model, LightningModule):
        raise TypeError(
            f"`model` must be a `LightningModule`: trainer.{fn}() got `{type(model).__name__}`. Subclass "
            "fulmen.LightningModule (or pass torch.compile(your_lightning_module))."
        )
    return model


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "AdvancedProfiler": "fulmen.profilers.advanced.AdvancedProfiler",
    "DummyLogger": "fulmen.loggers.logger.DummyLogger",
    "PassThroughProfiler": "fulmen.profilers.base.PassThroughProfiler",
    "Profiler": "fulmen.profilers.profiler.Profiler",
    "PyTorchProfiler": "fulmen.profilers.pytorch.PyTorchProfiler",
    "SimpleProfiler": "fulmen.profilers.simple.SimpleProfiler",
    "XLAProfiler": "fulmen.profilers.xla.XLAProfiler",
})  # fmt: skip

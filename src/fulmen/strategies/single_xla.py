"""``SingleDeviceXLAStrategy``: one process on one XLA device (a TPU core); needs ``torch_xla``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.optim import Optimizer

from fulmen.accelerators.xla import require_xla
from fulmen.precision import Precision as Precision
from fulmen.strategies.single_device import SingleDeviceStrategy
from fulmen.utilities.imports import _XLA_AVAILABLE as _XLA_AVAILABLE
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.parameter_tying import find_shared_parameters as find_shared_parameters
from fulmen.utilities.parameter_tying import set_shared_parameters as set_shared_parameters

if TYPE_CHECKING:
    from fulmen.accelerators import Accelerator
    from fulmen.plugins.io import CheckpointIO
    from fulmen.precision import Precision


class SingleDeviceXLAStrategy(SingleDeviceStrategy):
    """Train on XLA device ``device`` (an index, or a ``torch.device`` whose index is taken). ``debug``:
    torch_xla's debug output (``PT_XLA_DEBUG=1``)."""

    def __init__(
        self,
        device: torch.device | str | int,
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        debug: bool = False,
    ) -> None:
        require_xla("SingleDeviceXLAStrategy (strategy='single_xla')", available=_XLA_AVAILABLE)
        import torch_xla.core.xla_model as xm

        if isinstance(device, str):
            device = int(device) if device.strip().isdigit() else torch.device(device)
        index = device.index if isinstance(device, torch.device) else device
        xla_device = xm.xla_device() if index is None else xm.xla_device(index)
        super().__init__(
            device=torch.device(xla_device), accelerator=accelerator, checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin,
        )  # fmt: skip
        self.debug = debug

    def setup_environment(self) -> None:
        if self.debug:
            os.environ["PT_XLA_DEBUG"] = "1"
        super().setup_environment()

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register("single_xla", cls, description=cls.__name__)

    def optimizer_step(
        self, optimizer: Optimizer, closure: Callable[[], Any], model: torch.nn.Module | None = None, **kwargs: Any
    ) -> Any:
        """The step, then ``mark_step``: XLA records operations lazily, and the graph of one step is compiled
        and run there (without it the graph would grow across steps)."""
        output = super().optimizer_step(optimizer, closure, model, **kwargs)
        import torch_xla.core.xla_model as xm

        xm.mark_step()
        return output


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "CheckpointIO": "fulmen.plugins.io.checkpoint_plugin.CheckpointIO",
    "TrainerFn": "fulmen.runtime.state.TrainerFn",
    "XLACheckpointIO": "fulmen.plugins.io.xla_plugin.XLACheckpointIO",
    "XLAPrecision": "fulmen.plugins.precision.xla.XLAPrecision",
})  # fmt: skip

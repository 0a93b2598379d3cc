"""``SingleDeviceXLAStrategy``: one process on one XLA device (a TPU core); needs ``torch_xla``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.optim import Optimizer

from fulmen.accelerators.xla import require_xla
from fulmen.strategies.single_device import SingleDeviceStrategy
from fulmen.utilities.imports import _XLA_AVAILABLE as _XLA_AVAILABLE

if TYPE_CHECKING:
    from fulmen.accelerators import Accelerator
    from fulmen.plugins.io import CheckpointIO
    from fulmen.precision import Precision


class SingleDeviceXLAStrategy(SingleDeviceStrategy):
    """Train on XLA device ``device`` (an index, or a ``torch.device`` whose index is taken). ``debug``:
    torch_xla's debug output (``PT_XLA_DEBUG=1``)."""

    strategy_name = "single_xla"

    def __init__(
        self,
        device: torch.device | str | int,
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        debug: bool = False,
    ) -> None:
        require_xla("SingleDeviceXLAStrategy (strategy='single_xla')")
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

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any], **kwargs: Any) -> Any:
        """The step, then ``mark_step``: XLA records operations lazily, and the graph of one step is compiled
        and run there (without it the graph would grow across steps)."""
        output = super().optimizer_step(optimizer, closure, **kwargs)
        import torch_xla.core.xla_model as xm

        xm.mark_step()
        return output

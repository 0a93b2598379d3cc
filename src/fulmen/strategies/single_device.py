"""One process training on one device: the CPU, one GPU, one MPS or XLA device."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from fulmen.strategies.strategy import Strategy

if TYPE_CHECKING:
    from fulmen.accelerators import Accelerator
    from fulmen.plugins.io import CheckpointIO
    from fulmen.precision import Precision


class SingleDeviceStrategy(Strategy):
    """One process on ``device`` (a ``torch.device``, its name such as ``"cuda:1"``, or a CUDA index)."""

    strategy_name = "single_device"

    def __init__(
        self,
        device: torch.device | str | int = "cpu",
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
    ) -> None:
        super().__init__(accelerator=accelerator, checkpoint_io=checkpoint_io, precision_plugin=precision_plugin)
        if isinstance(device, int):
            device = torch.device("cuda", device)
        self._root_device = torch.device(device)

"""One process training on one device: the CPU, one GPU, one MPS or XLA device."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from fulmen.precision import Precision as Precision
from fulmen.strategies.strategy import Strategy
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases

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

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__)


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "CheckpointIO": "fulmen.plugins.io.checkpoint_plugin.CheckpointIO",
})  # fmt: skip

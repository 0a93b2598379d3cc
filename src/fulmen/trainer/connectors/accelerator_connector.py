"""``lightning.pytorch.trainer.connectors.accelerator_connector``: the Trainer picks its hardware with
:func:`fulmen.accelerators.select_accelerator`, its strategy with
:func:`fulmen.strategies.factory.select_strategy` and its precision plugin with
:func:`fulmen.precision.select_precision`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.accelerators import select_accelerator
from fulmen.precision import select_precision
from fulmen.strategies.factory import select_strategy

if TYPE_CHECKING:
    from fulmen.accelerators import Accelerator
    from fulmen.precision import Precision
    from fulmen.strategies.strategy import Strategy
    from fulmen.trainer.trainer import Trainer

__all__ = ["select_accelerator", "select_precision", "select_strategy"]


class _AcceleratorConnector:
    """``trainer._accelerator_connector``: read by libraries written against Lightning's trainer internals (the
    pruning callback of optuna-integration asks ``is_distributed`` to choose how it reports across processes).
    A read-only view of the choices the Trainer made; fulmen itself never reads it."""

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    @property
    def is_distributed(self) -> bool:
        """Whether the strategy runs several communicating processes (the DDP family, FSDP, DeepSpeed)."""
        return self._trainer.strategy.is_distributed

    @property
    def strategy(self) -> Strategy:
        return self._trainer.strategy

    @property
    def accelerator(self) -> Accelerator:
        return self._trainer.accelerator

    @property
    def precision_plugin(self) -> Precision:
        return self._trainer.precision_plugin

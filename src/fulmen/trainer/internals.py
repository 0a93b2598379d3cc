"""Lightning's private trainer objects, as views of fulmen's own state.

Libraries and callbacks written against Lightning's trainer internals drive them: optuna-integration asks
``trainer._accelerator_connector.is_distributed``; finetuning-scheduler restores the best checkpoint of each
fine-tuning phase through ``trainer._checkpoint_connector``, orders the callbacks it adds with
``trainer._callback_connector._reorder_callbacks`` and reads how a monitored key is reduced from
``trainer._results``; tests written for Lightning attach and prepare data through ``trainer._data_connector``.
Each name here answers from the one place fulmen keeps that state; fulmen's own code never
goes through them.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, cast

from fulmen.trainer.connectors.accelerator_connector import _AcceleratorConnector
from fulmen.trainer.connectors.callback_connector import _CallbackConnector
from fulmen.trainer.connectors.data_connector import _DataConnector

if TYPE_CHECKING:
    from fulmen.runtime.context import RunContext
    from fulmen.runtime.results import ResultCollection
    from fulmen.trainer.checkpointing import CheckpointConnector
    from fulmen.trainer.runner import StageRunner
    from fulmen.trainer.trainer import Trainer


class LightningInternals:
    """The Trainer's Lightning-internal names (a base class of :class:`~fulmen.trainer.trainer.Trainer`)."""

    _context: RunContext
    _runner: StageRunner

    @functools.cached_property
    def _accelerator_connector(self) -> _AcceleratorConnector:
        """The flags and the choices made from them (one object per Trainer: what a library sets on it stays)."""
        return _AcceleratorConnector.of_trainer(cast("Trainer", self))

    @functools.cached_property
    def _callback_connector(self) -> _CallbackConnector:
        return _CallbackConnector(cast("Trainer", self))

    @property
    def _checkpoint_connector(self) -> CheckpointConnector:
        """Restores a checkpoint step by step, the object the stage runner restores ``ckpt_path`` with."""
        return self._runner.checkpoints

    @functools.cached_property
    def _data_connector(self) -> _DataConnector:
        """Attaches and prepares the data, and injects the distributed sampler, through the trainer's data source."""
        return _DataConnector(cast("Trainer", self))

    def _teardown(self) -> None:
        """Give back what the last run holds (its teardown hooks are not called)."""
        self._runner.release()

    @property
    def _results(self) -> ResultCollection | None:
        """Where ``self.log`` writes at this moment (``None`` outside a run)."""
        return self._context.results

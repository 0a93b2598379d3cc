"""The Trainer's read-only views of a run: what users and callbacks read of it, never assign.

:class:`TrainerProperties` is a base class of :class:`~fulmen.trainer.trainer.Trainer`: each property answers
from the one :class:`~fulmen.runtime.context.RunContext` of the trainer (or its strategy, config and fit loop),
so ``Trainer.current_epoch`` and the rest are the Trainer's own names through its bases. What users may also
assign (``callbacks``, ``loggers``, ``should_stop``, ``ckpt_path`` ...) stays on the Trainer with its setter.
"""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Any

from fulmen.runtime.results import to_scalars
from fulmen.runtime.state import TrainerState, TrainerStatus
from fulmen.strategies.parallel import ParallelStrategy

if TYPE_CHECKING:
    from fulmen.accelerators import Accelerator
    from fulmen.core.module import LightningModule
    from fulmen.loops.fit_loop import FitLoop
    from fulmen.runtime.context import RunContext
    from fulmen.strategies.strategy import Strategy
    from fulmen.trainer.flags import TrainerConfig


class TrainerProperties:
    """The run's state, its progress and batch counts, the processes it runs in and the logged metrics."""

    _context: RunContext
    fit_loop: FitLoop

    # -- the run's state ------------------------------------------------------------------------------------
    @property
    def run_context(self) -> RunContext:
        """The state of the run the loops share (progress, stop requests, results, data, dispatcher)."""
        return self._context

    @property
    def config(self) -> TrainerConfig:
        """The validated flags (frozen)."""
        return self._context.config

    @property
    def state(self) -> TrainerState:
        return self._context.state

    @property
    def strategy(self) -> Strategy:
        return self._context.strategy

    @property
    def accelerator(self) -> Accelerator:
        return self._context.config.accelerator

    @property
    def lightning_module(self) -> LightningModule:
        return self._context.module  # type: ignore[return-value]

    # -- progress and batch counts --------------------------------------------------------------------------
    @property
    def global_step(self) -> int:
        return self._context.progress.global_step

    @property
    def current_epoch(self) -> int:
        return self._context.progress.current_epoch

    @property
    def is_last_batch(self) -> bool:
        return self.fit_loop.epoch_loop.is_last_batch

    @property
    def num_training_batches(self) -> int | float:
        return self._context.batches.train

    @property
    def val_check_batch(self) -> int | float:
        return self._context.batches.val_check

    @property
    def num_sanity_val_batches(self) -> list[int | float]:
        return self._context.batches.sanity or []

    @property
    def num_val_batches(self) -> list[int | float]:
        return self._context.batches.val or []

    @property
    def num_test_batches(self) -> list[int | float]:
        return self._context.batches.test or []

    @property
    def num_predict_batches(self) -> list[int | float]:
        return self._context.batches.predict or []

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps the whole fit is expected to take (for schedulers like OneCycleLR)."""
        return self.fit_loop.estimated_stepping_batches()

    @property
    def interrupted(self) -> bool:
        return self.state.status == TrainerStatus.INTERRUPTED

    @property
    def evaluating(self) -> bool:  # validating, testing or the sanity check
        return self.state.stage is not None and self.state.stage.evaluating

    @property
    def enable_validation(self) -> bool:
        """Whether fit will run validation: a ``validation_step``, a validation loader and batches to run."""
        return self._context.data.validation_enabled(load=False)

    @property
    def received_sigterm(self) -> bool:
        return self._context.stop.signal == signal.SIGTERM

    # -- the processes and devices --------------------------------------------------------------------------
    @property
    def world_size(self) -> int:
        return self.strategy.world_size

    @property
    def global_rank(self) -> int:
        return self.strategy.global_rank

    @property
    def local_rank(self) -> int:
        return self.strategy.local_rank

    @property
    def node_rank(self) -> int:
        return self.strategy.node_rank

    @property
    def is_global_zero(self) -> bool:
        return self.strategy.is_global_zero

    @property
    def num_devices(self) -> int:
        return len(self.config.devices)

    @property
    def device_ids(self) -> list[int]:
        """The devices' indices; CPU devices, which have none, are numbered by position (``devices=2``: [0, 1])."""
        return [d.index if d.index is not None else i for i, d in enumerate(self.config.devices)]

    @property
    def distributed_sampler_kwargs(self) -> dict[str, Any] | None:  # None unless several processes can run
        strategy = self.strategy
        return strategy.distributed_sampler_kwargs if isinstance(strategy, ParallelStrategy) else None

    # -- what was logged ------------------------------------------------------------------------------------
    @property
    def callback_metrics(self) -> dict[str, Any]:
        return self._context.metrics.current_callback_metrics()

    @property
    def logged_metrics(self) -> dict[str, Any]:
        return self._context.metrics.logged

    @property
    def progress_bar_metrics(self) -> dict[str, float]:
        """Values shown by the progress bar, as numbers (reading this is a host-device sync point)."""
        return to_scalars(self._context.metrics.current_pbar_metrics())

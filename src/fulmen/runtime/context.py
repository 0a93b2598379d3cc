"""The run context: everything the loops may read or change of a run, as plain attributes.

The Trainer builds one ``RunContext`` and hands it to its loops; the loops never see the Trainer itself.
Callbacks reach the same object through ``trainer.run_context`` (public, documented). Reading a plain
attribute here is one hop; the hot loop keeps to them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fulmen.runtime.data import DataSource
from fulmen.runtime.hooks import HookDispatcher, ProfilingHookDispatcher
from fulmen.runtime.metrics import MetricsHub
from fulmen.runtime.state import FitProgress, RunningStage, TrainerState

if TYPE_CHECKING:
    from fulmen.core.datamodule import LightningDataModule
    from fulmen.core.module import LightningModule
    from fulmen.runtime.protocols import RunCallback, RunLogger, RunOwner, RunProfiler
    from fulmen.runtime.results import ResultCollection
    from fulmen.strategies.strategy import Strategy
    from fulmen.trainer.flags import TrainerConfig  # type only: the loops read the frozen flags


class StopRequests:
    """``should_stop`` and its agreement between processes, and a signal waiting to be acted on.

    ``should_stop`` may be set by any rank at any time (a callback, the module); the loops act on it only once
    every rank agreed (:meth:`agree`, called where ranks wait for each other anyway: after a validation run
    and at the epoch end), so that all ranks stop at the same batch. With one process it counts at once.
    """

    __slots__ = ("agreed", "on_signal", "should_stop", "signal")

    def __init__(self) -> None:
        self.should_stop = False
        self.agreed = False
        self.signal: int | None = None  # set by the signal handler; acted on at the next batch boundary
        self.on_signal: Callable[[], None] = _nothing  # saves a checkpoint and unwinds (set by the trainer)

    def reset(self) -> None:
        self.should_stop = False
        self.agreed = False

    def agree(self, strategy: Strategy) -> None:
        self.should_stop = strategy.reduce_boolean_decision(self.should_stop, all=False)
        self.agreed = True

    def stopping(self, world_size: int) -> bool:
        """``should_stop`` as the loops read it: with several processes, only once the ranks agreed on it."""
        return self.should_stop and (self.agreed or world_size == 1)


def _nothing() -> None:
    return None


@dataclass
class CheckpointRequest:
    """The ``ckpt_path`` a stage was asked to start from, and how to load it (before it is resolved)."""

    path: Any = None
    weights_only: bool | None = None  # None: torch's default (safe unless the user's environment says otherwise)


@dataclass
class BatchCounts:
    """How many batches each stage runs (what progress bars and schedules read)."""

    train: int | float = float("inf")
    val_check: int | float = float("inf")  # validate after this many training batches
    sanity: list[int | float] | None = None
    val: list[int | float] | None = None
    test: list[int | float] | None = None
    predict: list[int | float] | None = None


class RunContext:
    """The state of a run that the loops, the dispatcher and the metrics share (see the module docstring)."""

    def __init__(self, trainer: RunOwner, config: TrainerConfig, strategy: Strategy) -> None:
        self.trainer = trainer  # handed to callbacks as their first argument, never read here
        self.config = config
        self.strategy = strategy
        self.state = TrainerState()
        self.progress = FitProgress()
        self.stop = StopRequests()
        self.max_epochs_default_applied = False  # a fit without any limit ran: trainer.max_epochs shows 1000
        self.checkpoint_request = CheckpointRequest()
        self.batches = BatchCounts()
        self.module: LightningModule | None = None
        self.datamodule: LightningDataModule | None = None
        # the runtime reads them, in order; the trainer, which made them, keeps them as lists of its own types
        self.callbacks: Sequence[RunCallback] = []
        self.loggers: Sequence[RunLogger] = []
        # batches per optimizer step now; a GradientAccumulationScheduler changes it during fit
        self.accumulate_grad_batches: int = config.accumulate_grad_batches
        self.results: ResultCollection | None = None  # where self.log writes at this moment
        self.ticks = 0  # evaluation batches and checkpoint saves: progress the hang watchdog sees
        # the profiler that records this trainer's runs (None: nothing is recorded, nothing is paid)
        self.profiler: RunProfiler | None = config.active_profiler
        self.hooks = HookDispatcher(self) if self.profiler is None else ProfilingHookDispatcher(self, self.profiler)
        self.metrics = MetricsHub(self)
        self.data = DataSource(self)

    @property
    def stopping(self) -> bool:
        return self.stop.stopping(self.strategy.world_size)

    @contextmanager
    def enter(self, stage: RunningStage | None = None, results: ResultCollection | None = None) -> Iterator[None]:
        """Where the run is, for a block: its running stage (``trainer.sanity_checking``, ``trainer.validating``
        ...) and the collection ``self.log`` writes to. Both are put back when the block ends. When it raises
        they stay as they were at the raise: the ``on_exception`` hooks see where the run was, and teardown
        resets them."""
        state = self.state
        before = state.stage, self.results
        if stage is not None:
            state.stage = stage
        if results is not None:
            self.results = results
        yield
        state.stage, self.results = before

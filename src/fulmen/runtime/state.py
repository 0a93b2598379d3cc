"""What the trainer is doing, and where the fit loop is: the state a checkpoint must hold to resume exactly.

Everything a restart needs lives in :class:`FitProgress` (one ``state_dict()``): the counters, the loop's
position (:class:`LoopPhase`), the open accumulation window and the scheduler counts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class TrainerStatus(str, Enum):
    INITIALIZING = "initializing"
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"

    @property
    def stopped(self) -> bool:
        return self in (self.FINISHED, self.INTERRUPTED)


class TrainerFn(str, Enum):
    FITTING = "fit"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"


class RunningStage(str, Enum):
    TRAINING = "train"
    SANITY_CHECKING = "sanity_check"
    VALIDATING = "validate"
    TESTING = "test"
    PREDICTING = "predict"

    @property
    def evaluating(self) -> bool:
        return self in (self.VALIDATING, self.TESTING, self.SANITY_CHECKING)

    @property
    def dataloader_prefix(self) -> str | None:
        if self in (self.VALIDATING, self.SANITY_CHECKING):
            return "val"
        return self.value


@dataclass
class TrainerState:
    status: TrainerStatus = TrainerStatus.INITIALIZING
    fn: TrainerFn | None = None
    stage: RunningStage | None = None

    @property
    def finished(self) -> bool:
        return self.status == TrainerStatus.FINISHED

    @property
    def stopped(self) -> bool:
        return self.status.stopped

    @property
    def fitting(self) -> bool:
        return self.fn == TrainerFn.FITTING

    @property
    def sanity_checking(self) -> bool:
        return self.stage == RunningStage.SANITY_CHECKING


class LoopPhase(str, Enum):
    """Where the fit loop is; a checkpoint written now resumes from this point (stored as its value)."""

    IDLE = "idle"  # between epochs: resume with the next epoch
    EPOCH_START = "epoch_start"  # in on_train_epoch_start: resume at the epoch's first batch
    BETWEEN = "between"  # between two batches of an epoch
    STEP = "step"  # inside training_step: resume before this batch (not bitwise)
    BATCH = "batch"  # after the step, in on_train_batch_end: the batch still has to end
    VALIDATION = "validation"  # in a validation run inside the epoch
    EPOCH_END = "epoch_end"  # in on_train_epoch_end


@dataclass
class AccumulationWindow:
    """Batches whose gradients add up to one optimizer step. Its ``size`` is read from the trainer's
    ``accumulate_grad_batches`` when it opens (its first batch) and stays fixed until it closes (its last
    batch, or the epoch's last batch)."""

    size: int = 1
    pos: int = 0  # batches of the open window run so far, the current one included
    done: bool = True  # the current batch closed the window: an optimizer step follows it

    def as_list(self) -> list[Any]:
        """``[pos, size, done]``: the checkpoint format."""
        return [self.pos, self.size, self.done]

    def before_current_batch(self) -> list[Any]:
        """The window as it was before the running batch opened or extended it (checkpoint format)."""
        if self.pos <= 1:
            return [0, self.size, True]
        return [self.pos - 1, self.size, False]

    def load(self, state: list[Any]) -> None:
        self.pos, self.size, self.done = int(state[0]), int(state[1]), bool(state[2])


@dataclass
class SchedulerSteps:
    """Learning-rate scheduler updates the loop made: in the whole run, and in the running epoch."""

    total: int = 0
    epoch: int = 0

    def count(self) -> None:
        self.total += 1
        self.epoch += 1


@dataclass
class FitProgress:
    """Counters and position of a fit run. Everything resume needs to continue where a run stopped lives here."""

    current_epoch: int = 0  # epochs completed; the index of the running epoch while one runs
    global_step: int = 0  # optimizer steps taken
    batches_that_stepped: int = 0  # batches that ended an accumulation window: the logger's step axis
    batch_idx: int = 0  # batches taken in the running epoch
    total_batch_idx: int = 0  # batches taken in the whole run
    epoch_start_step: int = 0  # global_step when the running epoch started
    phase: LoopPhase = LoopPhase.IDLE
    window: AccumulationWindow = field(default_factory=AccumulationWindow)
    scheduler_steps: SchedulerSteps = field(default_factory=SchedulerSteps)

    _COUNTERS = ("current_epoch", "global_step", "batches_that_stepped", "batch_idx", "total_batch_idx",
                 "epoch_start_step")  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        """Plain data (a checkpoint loads it with ``weights_only=True``)."""
        state: dict[str, Any] = {name: getattr(self, name) for name in self._COUNTERS}
        state["phase"] = self.phase.value
        state["window"] = self.window.as_list()
        state["scheduler_steps"] = [self.scheduler_steps.total, self.scheduler_steps.epoch]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name in self._COUNTERS:
            if name in state:
                setattr(self, name, int(state[name]))
        if "phase" in state:
            self.phase = LoopPhase(state["phase"])
        if state.get("window") is not None:
            self.window.load(state["window"])
        if "scheduler_steps" in state:
            self.scheduler_steps.total, self.scheduler_steps.epoch = (int(x) for x in state["scheduler_steps"])

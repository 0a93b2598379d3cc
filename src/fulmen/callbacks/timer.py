"""``Timer``: track time per stage and stop training after a duration (``Trainer(max_time=...)``)."""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING, Any

from fulmen.core.hooks import Callback
from fulmen.runtime.state import RunningStage as RunningStage
from fulmen.utilities.enums import LightningEnum
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.parsing import parse_time
from fulmen.utilities.rank_zero import rank_zero_info

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

_STAGES = ("train", "validate", "test", "predict")


class Interval(LightningEnum):
    """How often a ``Timer`` checks its duration: after every training step, or at every epoch end."""

    step = "step"
    epoch = "epoch"


class Timer(Callback):
    """Stops training once ``duration`` has passed, checked every step or every epoch (``interval``)."""

    def __init__(
        self,
        duration: str | datetime.timedelta | dict[str, int] | None = None,
        interval: str = "step",
        verbose: bool = True,
    ) -> None:
        super().__init__()
        parsed = parse_time(duration, flag="Timer(duration)")
        if interval not in tuple(member.value for member in Interval):
            raise MisconfigurationException(
                f"Unsupported parameter value Timer(interval={interval!r}). Use 'step' or 'epoch'."
            )
        self._duration = parsed.total_seconds() if parsed is not None else None
        self._interval = interval
        self._verbose = verbose
        self._start_time: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._end_time: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._offset = 0.0

    def start_time(self, stage: str = "train") -> float | None:
        return self._start_time[stage]

    def end_time(self, stage: str = "train") -> float | None:
        return self._end_time[stage]

    def time_elapsed(self, stage: str = "train") -> float:
        start, end = self._start_time[stage], self._end_time[stage]
        offset = self._offset if stage == "train" else 0.0
        if start is None:
            return offset
        return offset + ((end if end is not None else time.monotonic()) - start)

    def time_remaining(self, stage: str = "train") -> float | None:
        return self._duration - self.time_elapsed(stage) if self._duration is not None else None

    def _start(self, stage: str) -> None:
        self._start_time[stage] = time.monotonic()
        self._end_time[stage] = None

    def _end(self, stage: str) -> None:
        self._end_time[stage] = time.monotonic()

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        # a budget already spent (a zero duration, or a resumed run's recorded time) stops before any step
        if self._duration is not None:
            self._check(trainer)

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start("train")

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._end("train")

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start("validate")

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._end("validate")

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start("test")

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._end("test")

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start("predict")

    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._end("predict")

    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._interval == Interval.step and self._duration is not None:
            self._check(trainer)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._interval == Interval.epoch and self._duration is not None:
            self._check(trainer)

    def _check(self, trainer: Trainer) -> None:
        assert self._duration is not None
        should_stop = self.time_elapsed("train") >= self._duration
        should_stop = trainer.strategy.broadcast(should_stop)
        trainer.should_stop = trainer.should_stop or should_stop
        if should_stop and self._verbose:
            elapsed = datetime.timedelta(seconds=int(self.time_elapsed("train")))
            rank_zero_info(f"Time limit reached. Elapsed time is {elapsed}. Signaling Trainer to stop.")

    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: self.time_elapsed(stage) for stage in _STAGES}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._offset = state_dict.get("time_elapsed", {}).get("train", 0.0)

"""Lightning's import path ``lightning.pytorch.trainer.states``: what the trainer is doing (the classes live
in the runtime layer), and :class:`StageFlag`, the trainer's ``training`` / ``validating`` / ...
attributes."""

from __future__ import annotations

from typing import Any, overload

from fulmen.runtime.state import RunningStage, TrainerFn, TrainerState, TrainerStatus
from fulmen.utilities.enums import LightningEnum as LightningEnum


class StageFlag:
    """``trainer.<stage>``: whether ``stage`` is running. Setting ``True`` enters the stage, ``False`` leaves it
    when it is the running one (a callback or test that drives a loop by hand sets them, as with Lightning)."""

    def __init__(self, stage: RunningStage) -> None:
        self.stage = stage

    @overload
    def __get__(self, obj: None, owner: type) -> StageFlag: ...
    @overload
    def __get__(self, obj: object, owner: type) -> bool: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        return self if obj is None else obj.state.stage == self.stage

    def __set__(self, obj: Any, value: bool) -> None:
        state: TrainerState = obj.state
        if value:
            state.stage = self.stage
        elif state.stage == self.stage:
            state.stage = None


__all__ = ["RunningStage", "TrainerFn", "TrainerState", "TrainerStatus"]

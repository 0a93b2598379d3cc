"""``lightning.pytorch.trainer.states``: what the trainer is doing (the classes live in the runtime layer)."""

from fulmen.runtime.state import RunningStage, TrainerFn, TrainerState, TrainerStatus

__all__ = ["RunningStage", "TrainerFn", "TrainerState", "TrainerStatus"]

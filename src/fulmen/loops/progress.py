"""``lightning.pytorch.loops.progress``: a fit run's counters and position are one
:class:`~fulmen.runtime.state.FitProgress` (with its :class:`~fulmen.runtime.state.AccumulationWindow`,
:class:`~fulmen.runtime.state.SchedulerSteps` and :class:`~fulmen.runtime.state.LoopPhase`).
:func:`fulmen.loops.resume.loops_state_dict` writes them in the checkpoint as Lightning's progress trackers,
so files move both ways."""

from fulmen.loops.resume import loops_state_dict
from fulmen.runtime.state import AccumulationWindow, FitProgress, LoopPhase, SchedulerSteps

__all__ = ["AccumulationWindow", "FitProgress", "LoopPhase", "SchedulerSteps", "loops_state_dict"]

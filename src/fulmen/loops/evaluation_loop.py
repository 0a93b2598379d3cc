"""``lightning.pytorch.loops.evaluation_loop``: validation and test runs (the sanity check and the validation
inside fit too) are :class:`fulmen.loops.evaluation.EvaluationLoop`."""

from fulmen.loops.evaluation import EvaluationLoop
from fulmen.utilities.imports import _RICH_AVAILABLE as _RICH_AVAILABLE

__all__ = ["EvaluationLoop", "RestartStage"]

# Lightning's name for this loop (its test suites and some programs import or patch it)
_EvaluationLoop = EvaluationLoop


class RestartStage:
    """Whether a restored evaluation run restarts in the middle, as plain strings (what code that reads a
    Lightning evaluation loop's restart stage compares with)."""

    NONE = "none"
    RESTARTED_MID_EVALUATION = "restarted_mid_evaluation"

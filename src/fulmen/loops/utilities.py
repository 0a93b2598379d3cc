"""Helpers the loops share (``lightning.pytorch.loops.utilities``): the finite-loss check, when a limit on
steps is reached (:func:`max_steps_reached`), and the gradient mode of evaluation (:func:`no_grad_context`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from fulmen.accelerators.xla import XLAAccelerator as XLAAccelerator
from fulmen.loops.evaluation_loop import no_grad_context
from fulmen.loops.training_epoch_loop import can_stop_early, max_steps_reached
from fulmen.runtime.state import RunningStage as RunningStage
from fulmen.strategies.fsdp import FSDPStrategy as FSDPStrategy
from fulmen.strategies.parallel import ParallelStrategy as ParallelStrategy
from fulmen.strategies.strategy import Strategy as Strategy
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning as PossibleUserWarning

if TYPE_CHECKING:
    from torch import Tensor

__all__ = ["can_stop_early", "check_finite_loss", "max_steps_reached", "no_grad_context"]


def check_finite_loss(loss: Tensor | None) -> None:
    """Raise ``ValueError`` when ``loss`` holds a NaN or an infinity (None, a skipped step, passes)."""
    if loss is None or bool(torch.isfinite(loss).all()):
        return
    # format() shows a scalar loss as a number ("nan"), the form a message filter written for Lightning expects
    raise ValueError(
        f"The loss returned in `training_step` is {loss}: it must be finite (no NaN or inf). Lower the learning "
        "rate, clip gradients (Trainer(gradient_clip_val=...)) or look for the operation that overflows with "
        "Trainer(detect_anomaly=True)."
    )


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "Timer": "fulmen.callbacks.timer.Timer",
    "is_param_in_hook_signature": "fulmen.utilities.signature_utils.is_param_in_hook_signature",
})  # fmt: skip

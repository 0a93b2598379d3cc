"""Manual optimization: training_step steps the optimizers itself (``lightning.pytorch.loops.optimization.
manual``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from torch import Tensor

from fulmen.core.optimizer import do_nothing_closure as do_nothing_closure
from fulmen.loops.optimization.closure import OutputResult
from fulmen.loops.progress import Progress, progress_view
from fulmen.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from fulmen.runtime.context import RunContext


@dataclass
class ManualResult(OutputResult):
    """What training_step returned under manual optimization: ``extra`` is what the batch hooks receive (a
    returned Tensor becomes ``{"loss": ...}``; the loss is detached, the backward having already run)."""

    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_training_step_output(cls, training_step_output: Any) -> ManualResult:
        output = training_step_output
        if output is None:
            return cls()
        if isinstance(output, Tensor):
            extra: dict[str, Any] = {"loss": output}
        elif isinstance(output, Mapping):
            extra = dict(output)  # a copy: the user's dict stays as it was
        else:
            raise MisconfigurationException(
                f"training_step returned a {type(output).__name__}; under manual optimization return None, a "
                "Tensor or a dict."
            )
        loss = extra.get("loss")
        if isinstance(loss, Tensor):
            extra["loss"] = loss.detach()
        return cls(extra=extra)

    def asdict(self) -> dict[str, Any]:
        return self.extra


class ManualOptimization:
    """training_step does everything itself; the loop counts each ``optimizer.step()`` as a global step."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.post_step = False  # the strategy overrides post_training_step (set by the epoch loop's plan)

    @property
    def optim_step_progress(self) -> Progress:
        """Lightning's tracker of the ``optimizer.step()`` calls training_step made, read from the run's counters."""
        return progress_view(self.context.progress, lambda: False, "optimizer_step")

    def count_steps(self, manual: bool) -> None:
        """Under manual optimization every ``opt.step()`` is a global step; under automatic optimization the
        loop counts one per ``optimizer_step`` call instead (the count Lightning's checkpoints hold)."""
        progress = self.context.progress

        def count() -> None:
            progress.global_step += 1

        for optimizer in self.context.strategy.lightning_optimizers:
            optimizer.count_steps(count if manual else None)

    def run(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        strategy = self.context.strategy
        output = strategy.training_step(batch, batch_idx)
        if self.post_step:
            strategy.post_training_step()
        return ManualResult.from_training_step_output(output).asdict()

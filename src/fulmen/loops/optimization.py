"""One optimizer step under automatic optimization, and the manual-optimization step.

Automatic optimization builds a closure — training_step, zero_grad (first batch of an accumulation
window), backward — and hands it to ``optimizer.step(closure=...)``, so optimizers that re-evaluate the
loss (LBFGS) work. On batches that only accumulate, the closure runs without a step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor

from fulmen.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer


class ClosureResult:
    """What training_step returned: the (accumulation-normalised) loss and any extra outputs."""

    __slots__ = ("closure_loss", "extra", "loss")

    def __init__(self, closure_loss: Tensor | None, extra: dict[str, Any]) -> None:
        self.closure_loss = closure_loss
        self.extra = extra
        self.loss = closure_loss.detach().clone() if closure_loss is not None else None

    @classmethod
    def from_step_output(cls, output: Any, normalize: int) -> ClosureResult:
        loss: Tensor | None
        extra: dict[str, Any] = {}
        if isinstance(output, Mapping):
            if "loss" not in output or output["loss"] is None:
                raise MisconfigurationException(
                    f"training_step returned a dict without a 'loss' key (keys: {sorted(output)}). Under "
                    "automatic optimization include the loss to optimise: return {'loss': loss, ...}."
                )
            loss = output["loss"]
            extra = {k: v for k, v in output.items() if k not in ("loss", "hiddens")}
        elif isinstance(output, Tensor):
            loss = output
        elif output is None:
            loss = None
        else:
            raise MisconfigurationException(
                f"training_step returned a {type(output).__name__}; under automatic optimization it must "
                "return a loss Tensor, a dict with a 'loss' key, or None to skip the batch."
            )
        if loss is not None:
            if not isinstance(loss, Tensor):
                raise MisconfigurationException(
                    f"training_step's loss is a {type(loss).__name__}; it must be a Tensor."
                )
            if normalize > 1:
                loss = loss / normalize  # new tensor: the user's returned value stays as it was
        return cls(loss, extra)

    def asdict(self) -> dict[str, Any]:
        return {"loss": self.loss, **self.extra}


class Closure:
    """Callable handed to ``optimizer.step``: runs the step function and remembers its result."""

    def __init__(self, step_fn: Any) -> None:
        self._step_fn = step_fn
        self._result: ClosureResult | None = None

    def __call__(self) -> Tensor | None:
        self._result = self._step_fn()
        return self._result.loss if self._result is not None else None

    def consume_result(self) -> ClosureResult | None:
        result, self._result = self._result, None
        return result


class AutomaticOptimization:
    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def run(self, optimizer: Any, batch: Any, batch_idx: int, accumulate: bool) -> dict[str, Any]:
        trainer = self.trainer
        strategy = trainer.strategy
        window = trainer.accumulate_grad_batches
        first_of_window = batch_idx % window == 0
        hooks = trainer._hooks

        def step_fn() -> ClosureResult:
            output = strategy.training_step(batch, batch_idx)
            result = ClosureResult.from_step_output(output, window)
            if first_of_window:
                hooks.call_callbacks("on_before_zero_grad", optimizer)
                hooks.call_module("on_before_zero_grad", optimizer)
                hooks.call_module("optimizer_zero_grad", trainer.current_epoch, batch_idx, optimizer)
            if result.closure_loss is not None:
                strategy.backward(result.closure_loss, optimizer)
            return result

        closure = Closure(step_fn)
        if accumulate:
            # not the last batch of the window: no step, and no gradient sync across processes
            with strategy.block_backward_sync():
                closure()
        else:
            lightning_optimizer = strategy._lightning_optimizers[0]
            hooks.call_module(
                "optimizer_step", trainer.current_epoch, batch_idx, lightning_optimizer, closure
            )
        result = closure.consume_result()
        if result is None or result.loss is None:
            return {}
        return result.asdict()


class ManualOptimization:
    """training_step does everything itself; the trainer only counts optimizer steps."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def run(self, batch: Any, batch_idx: int) -> dict[str, Any]:
        output = self.trainer.strategy.training_step(batch, batch_idx)
        if output is None:
            return {}
        if isinstance(output, Tensor):
            return {"loss": output.detach()}
        if isinstance(output, Mapping):
            return {k: (v.detach() if isinstance(v, Tensor) else v) for k, v in output.items()}
        raise MisconfigurationException(
            f"training_step returned a {type(output).__name__}; under manual optimization return None, a "
            "Tensor or a dict."
        )

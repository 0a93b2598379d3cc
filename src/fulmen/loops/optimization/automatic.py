"""Automatic optimization: one optimizer step per batch, through a closure (``lightning.pytorch.loops.
optimization.automatic``).

The loop builds a closure -- training_step, zero_grad (first batch of an accumulation window), backward --
and hands it to ``optimizer.step(closure=...)``, so optimizers that re-evaluate the loss (LBFGS) work. On
batches that only accumulate, the closure runs without a step.

:class:`Closure` is the general form (any step, backward and zero_grad functions); the loop's own closure is
a subclass that calls the hooks directly, so a step builds one object and no functions.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from fulmen.loops.optimization.closure import CLOSURE_NOT_RUN, AbstractClosure, OutputResult
from fulmen.loops.progress import OptimizationProgress
from fulmen.precision import closure_runs_first
from fulmen.runtime.hooks import training_step_takes_optimizer_idx
from fulmen.utilities.exceptions import MisconfigurationException, UnsupportedSetupError
from fulmen.utilities.rank_zero import WarningCache

if TYPE_CHECKING:
    from torch.optim import Optimizer

    from fulmen.runtime.context import RunContext

# the words Lightning users' warning filters match
_RETURNED_NONE = "`training_step` returned `None`. If this was on purpose, ignore this warning..."


@dataclass
class ClosureResult(OutputResult):
    """What training_step returned under automatic optimization.

    ``closure_loss`` is the loss to back-propagate (divided by the accumulation window), ``loss`` the same
    value detached (what the hooks receive), ``extra`` every other key training_step's dict held.
    """

    closure_loss: Tensor | None
    loss: Tensor | None = field(init=False, default=None)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # detach() without a copy: backward does not write into the loss, and a copy is an allocation
        # (several microseconds) per step
        self.loss = self.closure_loss.detach() if self.closure_loss is not None else None

    @classmethod
    def from_training_step_output(cls, training_step_output: Any, normalize: int = 1) -> ClosureResult:
        """Read training_step's return value: a loss Tensor, a dict with a ``"loss"`` key, or None (the batch
        is skipped). ``normalize``: the accumulation window the loss is divided by."""
        output = training_step_output
        loss: Any
        extra: dict[str, Any] = {}
        if isinstance(output, Mapping):
            loss = output.get("loss")
            if loss is None:
                raise MisconfigurationException(
                    f"training_step returned a dict without a 'loss' key (keys: {sorted(map(str, output))}). Under "
                    "automatic optimization include the loss to optimise: return {'loss': loss, ...}."
                )
            extra = {k: v for k, v in output.items() if k != "loss"}
        elif isinstance(output, Tensor) or output is None:
            loss = output
        else:
            raise MisconfigurationException(
                f"training_step returned a {type(output).__name__}; under automatic optimization it must return a "
                "loss Tensor, a dict with a 'loss' key, or None to skip the batch."
            )
        if loss is not None:
            if not isinstance(loss, Tensor):
                raise MisconfigurationException(f"training_step's loss is a {type(loss).__name__}; it must be a Tensor.")
            if normalize > 1:
                loss = loss / normalize  # new tensor: the user's returned value stays as it was
        return cls(loss, extra=extra)

    def asdict(self) -> dict[str, Any]:
        return {"loss": self.loss, **self.extra}


class Closure(AbstractClosure[ClosureResult]):
    """What ``optimizer.step`` receives under automatic optimization: runs ``step_fn`` (training_step, giving a
    :class:`ClosureResult`), then ``zero_grad_fn`` and ``backward_fn(loss)`` when given, with gradients
    enabled whatever the optimizer's step switched off. Calling it returns the detached loss (None when the
    step returned None: the step is then skipped).
    """

    warning_cache = WarningCache()
    # a None result means training_step skipped the batch: the precision plugin then skips the step (user
    # closures of manual optimization may return None and still want their step)
    skip_step_without_loss = True

    def __init__(
        self,
        step_fn: Callable[[], ClosureResult],
        backward_fn: Callable[[Tensor], None] | None = None,
        zero_grad_fn: Callable[[], None] | None = None,
    ) -> None:
        super().__init__()
        self._step_fn = step_fn
        self._backward_fn = backward_fn
        self._zero_grad_fn = zero_grad_fn

    def closure(self, *args: Any, **kwargs: Any) -> ClosureResult:
        with torch.enable_grad():
            result = self._step_fn()
            if result.closure_loss is None:
                self.warning_cache.warn(_RETURNED_NONE)
            if self._zero_grad_fn is not None:
                self._zero_grad_fn()
            if self._backward_fn is not None and result.closure_loss is not None:
                self._backward_fn(result.closure_loss)
        return result

    def __call__(self, *args: Any, **kwargs: Any) -> Tensor | None:
        self._result = result = self.closure(*args, **kwargs)
        return result.loss


_NOT_RUN = object()  # a closure's training_step output before it ran


class _LoopClosure(Closure):
    """The fit loop's closure for one optimizer on one batch: training_step, zero_grad on the window's first
    batch, backward. Optimizers like LBFGS call it several times; the last call's result is what the batch
    returns. Keeps training_step's Tensor (divided by the window when accumulating) in the common case of a plain
    loss, so such a step builds no result object (nor its detached loss, unless a hook reads the outputs)."""

    def __init__(
        self, loop: AutomaticOptimization, idx: int, optimizer: Optimizer, step_args: tuple[Any, ...],
        first_of_window: bool, window: int, returns_read: bool = True, output: Any = _NOT_RUN,
    ) -> None:  # fmt: skip
        self._result: ClosureResult | Tensor | None = None  # type: ignore[assignment]
        self._loop = loop
        self._returns_read = returns_read  # whether anyone sees what a call returns (an optimizer_step override)
        self._idx = idx
        self._optimizer = optimizer
        self._step_args = step_args
        self._first = first_of_window
        self._window = window
        self._output = output  # training_step's output when it already ran (a straight-through step's)

    def __call__(self, *args: Any, **kwargs: Any) -> Tensor | None:
        if not torch.is_grad_enabled():  # an optimizer's step that calls the closure under no_grad
            with torch.enable_grad():
                return self()
        loop = self._loop
        strategy = loop.context.strategy
        optimizer = self._optimizer
        output, self._output = self._output, _NOT_RUN
        if output is _NOT_RUN:
            output = strategy.training_step(*self._step_args)
        if loop.post_step:
            strategy.post_training_step()
        if type(output) is Tensor:  # the common case: no result object to build (its detached loss is made
            # only if a hook reads the outputs)
            tensor = output if self._window == 1 else output / self._window
            result: ClosureResult | Tensor = tensor
            loss: Tensor | None = tensor
        else:
            result = ClosureResult.from_training_step_output(output, self._window)
            loss = result.closure_loss
            if output is None:  # once per process, as Lightning's Closure says it (its class-level cache)
                Closure.warning_cache.warn(_RETURNED_NONE)
        if self._first:
            if loop._inline_zero_grad:
                optimizer.zero_grad(set_to_none=True)  # the default optimizer_zero_grad
            else:
                loop.zero_grad_hooks(self._idx, optimizer, self._step_args[1])
        if loss is not None:
            strategy.backward(loss, optimizer)
        self._result = result
        if loss is None or not self._returns_read:
            # an accumulating batch, or the default optimizer_step: what the call returns is dropped, so the loss
            # goes back as it is (one operation less per step)
            return loss
        # an optimizer_step override sees the closure's loss as Lightning gives it: detached (a view, no copy)
        return loss.detach()

    def closure(self, *args: Any, **kwargs: Any) -> ClosureResult:
        self(*args, **kwargs)
        return self._as_result()

    def consume_result(self) -> ClosureResult:
        result = self._as_result()
        self._result = None
        return result

    def _as_result(self) -> ClosureResult:
        result = self._result
        if result is None:
            raise MisconfigurationException(CLOSURE_NOT_RUN)
        return ClosureResult(result) if isinstance(result, Tensor) else result

    def outputs(self) -> dict[str, Any]:
        """What training_step returned (its last run), for on_train_batch_end and training_epoch_end."""
        result = self._result
        if result is None:
            raise MisconfigurationException(CLOSURE_NOT_RUN)
        self._result = None
        if type(result) is Tensor:
            return {"loss": result.detach()}
        if result.loss is None:  # type: ignore[union-attr]
            return {}
        return result.asdict()  # type: ignore[union-attr]


class AutomaticOptimization:
    """The trainer steps the optimizers: one closure per active optimizer per batch.

    With several optimizers (the 1.x API: ``training_step(batch, batch_idx, optimizer_idx)``), each batch
    runs ``training_step`` once per optimizer, in order, with that optimizer's parameters toggled on and
    the parameters only other optimizers own frozen. Optimizer ``frequency`` values make the optimizers
    take turns: ``[{..., "frequency": 5}, {..., "frequency": 1}]`` gives 5 batches to the first, then 1 to
    the second, and so on.
    """

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.warnings = WarningCache()
        self.pass_optimizer_idx = False  # training_step takes optimizer_idx (decided once per fit)
        self.active: list[int] = [0]  # the optimizers that run on the current batch
        # the hooks left at their defaults run inline in the hot loop (see plan())
        self._inline_zero_grad = False
        self._inline_step = False
        self.post_step = False  # the strategy overrides post_training_step (set by the epoch loop's plan)
        self.outputs_unread = False  # set by the epoch loop: no hook or 1.x epoch end reads batch outputs
        self._plain_optimizer: Optimizer | None = None  # the optimizer of a straight-through step (plain_steps)

    @property
    def optim_progress(self) -> OptimizationProgress:
        """Lightning's optimizer-step trackers, read from the run's counters (``optim_progress.optimizer_steps``)."""
        return OptimizationProgress(self.context.progress)

    @property
    def step_flags(self) -> dict[str, bool]:
        """The switches this epoch's plan set, read-only: every boolean attribute by name, without its leading
        underscore (tests read them all, so that a switch added later cannot go untested)."""
        return {name.lstrip("_"): value for name, value in vars(self).items() if isinstance(value, bool)}

    def plan(self) -> None:
        """Decide, once per epoch, which default hooks the step may run inline instead of dispatching."""
        hooks = self.context.hooks
        self._inline_zero_grad = hooks.defaults_only("on_before_zero_grad", "optimizer_zero_grad")
        self._inline_step = hooks.defaults_only("optimizer_step")

    def setup(self) -> None:
        """Read training_step's signature once per fit; several optimizers need ``optimizer_idx`` in it."""
        context = self.context
        module = context.module
        assert module is not None
        n = len(context.strategy.optimizers)
        _, takes_idx, required = training_step_takes_optimizer_idx(module)
        if n > 1 and not takes_idx:
            raise UnsupportedSetupError(
                f"configure_optimizers returned {n} optimizers, but {type(module).__name__}.training_step has "
                "no `optimizer_idx` argument. Either add it — training_step(self, batch, batch_idx, "
                "optimizer_idx) is then called once per optimizer — or set `self.automatic_optimization = "
                "False` and step the optimizers yourself in training_step (opt1, opt2 = self.optimizers())."
            )
        # one optimizer: pass 0 only to a training_step that requires the argument (1.x passed nothing)
        self.pass_optimizer_idx = n > 1 or required
        self.active = list(range(n))

    def active_optimizers(self, batch_idx: int) -> list[int]:
        strategy = self.context.strategy
        frequencies = strategy.optimizer_frequencies
        if not frequencies:
            return list(range(len(strategy.optimizers)))
        place = batch_idx % sum(frequencies)
        for idx, end in enumerate(itertools.accumulate(frequencies)):
            if place < end:
                return [idx]
        raise AssertionError("unreachable: place < sum(frequencies)")

    def plain_steps(self) -> bool:
        """Whether this epoch's batches may run straight through (:meth:`run_plain`): one optimizer, which calls
        a closure first thing (torch's own but LBFGS), no accumulation, the default ``optimizer_step`` and
        ``optimizer_zero_grad``, no reader of the batch outputs, and a strategy that adds nothing to the steps
        (``Strategy.runs_plain_steps``). Set by the epoch loop's plan, after ``outputs_unread``."""
        context = self.context
        strategy = context.strategy
        plain = (
            len(strategy.optimizers) == 1 and not self.pass_optimizer_idx and not self.post_step
            and self.outputs_unread and self._inline_step and self._inline_zero_grad
            and context.accumulate_grad_batches == 1 and closure_runs_first(strategy.optimizers[0])
            and strategy.runs_plain_steps()
        )  # fmt: skip
        self._plain_optimizer = strategy.optimizers[0] if plain else None
        return plain

    def run_plain(self, batch: Any, batch_idx: int) -> None:
        """One batch as a hand-written loop runs it: training_step, zero_grad, backward, step. Only where
        :meth:`plain_steps` said so: the general path (:meth:`run`) then does the same, through its closure,
        the strategy and the precision plugin (tests/loops/test_plain_step.py compares the two). A training_step
        that returns anything but a loss tensor (a dict, None to skip) goes on along the general path."""
        optimizer = self._plain_optimizer
        assert optimizer is not None, "plain_steps() said no"
        if not torch.is_grad_enabled():  # the closure switches grad mode on itself
            self.run(batch, batch_idx, False, True, 1)
            return
        context = self.context
        loss = context.hooks.call_module("training_step", batch, batch_idx)
        if type(loss) is not Tensor:
            self._run_one(0, batch, batch_idx, False, True, 1, outputs=False, output=loss)
            return
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        context.progress.global_step += 1

    def run(self, batch: Any, batch_idx: int, accumulate: bool, first_of_window: bool, window: int) -> Any:
        """Optimize on one batch; returns its output (one optimizer) or a list with one entry per optimizer
        (None for optimizers that do not run on this batch). Without a reader of the outputs (see ``plan``)
        the one-optimizer case returns None."""
        context = self.context
        optimizers = context.strategy.optimizers
        if len(optimizers) == 1:
            if self.outputs_unread and self._inline_step:  # the step ran the closure: no output to build
                self._run_one(0, batch, batch_idx, accumulate, first_of_window, window, outputs=False)
                return None
            return self._run_one(0, batch, batch_idx, accumulate, first_of_window, window)
        self.active = active = self.active_optimizers(batch_idx)
        module = context.module
        assert module is not None
        outputs: list[Any] = [None] * len(optimizers)
        for idx in active:
            module.toggle_optimizer(optimizers[idx])
            try:
                outputs[idx] = self._run_one(idx, batch, batch_idx, accumulate, first_of_window, window)
            finally:
                module.untoggle_optimizer(optimizers[idx])
        return outputs

    def zero_grad_hooks(self, idx: int, optimizer: Any, batch_idx: int) -> None:
        """on_before_zero_grad and optimizer_zero_grad, when something overrides them."""
        hooks = self.context.hooks
        hooks.call_callbacks("on_before_zero_grad", optimizer)
        hooks.call_module("on_before_zero_grad", optimizer)
        hooks.call_module_idx(
            "optimizer_zero_grad", functools.partial(int, idx), self.context.progress.current_epoch, batch_idx,
            optimizer,
        )  # fmt: skip

    def _run_one(
        self, idx: int, batch: Any, batch_idx: int, accumulate: bool, first_of_window: bool, window: int,
        outputs: bool = True, output: Any = _NOT_RUN,
    ) -> dict[str, Any]:  # fmt: skip
        context = self.context
        strategy, progress = context.strategy, context.progress
        step_args = (batch, batch_idx, idx) if self.pass_optimizer_idx else (batch, batch_idx)
        optimizer = strategy.optimizers[idx]
        closure = _LoopClosure(
            self, idx, optimizer, step_args, first_of_window, window,
            returns_read=not (accumulate or self._inline_step), output=output,
        )  # fmt: skip
        if accumulate:
            # not the last batch of the window: no step, and no gradient sync across processes
            with strategy.block_backward_sync():
                closure()
        else:
            if self._inline_step:
                # the default optimizer_step: LightningOptimizer.step, whose own step hooks only count
                # manual-optimization steps
                strategy.optimizer_step(optimizer, closure)
            else:
                context.hooks.call_module_idx(
                    "optimizer_step", functools.partial(int, idx), progress.current_epoch, batch_idx,
                    strategy.lightning_optimizers[idx], closure,
                )  # fmt: skip
            # Lightning's count: one step per optimizer_step call, whether or not the override stepped
            progress.global_step += 1
        return closure.outputs() if outputs else {}

"""The step plan: which per-step work a strategy runs inline or skips, read from the hook dispatcher once per run,
and whether a training batch may run straight through (nothing of the strategy's or its precision's between the
module's ``training_step`` and the optimizer's step)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from fulmen.precision import Precision

if TYPE_CHECKING:
    from fulmen.runtime.hooks import HookDispatcher
    from fulmen.strategies.strategy import Strategy


class _StepPlan(NamedTuple):
    """What a step may skip, read from the dispatcher once per run (``generation``) rather than per step."""

    generation: int
    default_transfer: bool  # no batch-transfer hook overridden
    keeps_inputs: bool  # the precision leaves inputs as they are
    plain_forward: bool  # no context to enter for training_step, and no model to redirect it through
    inline_backward: bool  # on_before_backward / backward / on_after_backward and the precision's at their defaults
    plain_backward: bool  # the precision does not scale the loss
    strategy_pre_backward: bool  # the strategy's pre_backward / post_backward do something (a subclass's)
    strategy_post_backward: bool
    own_precision_step: bool  # the precision's optimizer_step is fulmen's (no subclass overrides it)
    nothing_after_closure: bool  # no hook and no clipping between backward and the step


# the strategy methods a straight-through step stands for: a subclass's override, one set on the instance or a
# patch of the class (tests patch them to watch the calls) makes the steps go through them
_STRAIGHT_THROUGH_METHODS = ("training_step", "backward", "optimizer_step")
_PLAIN_PRECISION_STEP = Precision._optimizer_step

# the precision's context each step runs in
_STEP_CONTEXTS = {"training_step": "train_step_context", "validation_step": "val_step_context",
                  "test_step": "test_step_context", "predict_step": "predict_step_context"}  # fmt: skip


def _has_step_context(precision: type[Precision], name: str) -> bool:
    """Whether the precision class has a context to enter for step ``name`` (its own step context, or a
    ``forward_context`` the default step context enters)."""
    context = _STEP_CONTEXTS[name]
    return not (
        precision.forward_context is Precision.forward_context and getattr(precision, context) is getattr(Precision, context)
    )


def step_methods(strategy_class: type[Strategy]) -> tuple[Callable[..., Any], ...]:
    """``strategy_class``'s ``training_step``, ``backward`` and ``optimizer_step``, as the class has them now."""
    return tuple(getattr(strategy_class, name) for name in _STRAIGHT_THROUGH_METHODS)


def plan_steps(strategy: Strategy, hooks: HookDispatcher, base: type[Strategy]) -> _StepPlan:
    """The step plan of ``strategy`` for ``hooks`` as they are now; ``base``: the class whose ``pre_backward`` /
    ``post_backward`` do nothing (``Strategy``, read as it is now)."""
    precision = type(strategy.precision_plugin)
    own = type(strategy)
    return _StepPlan(
        generation=hooks.generation,
        default_transfer=hooks.transfer_is_default(),
        keeps_inputs=precision.convert_input is Precision.convert_input,
        plain_forward=not _has_step_context(precision, "training_step") and strategy._redirect_target() is None,
        inline_backward=hooks.defaults_only("on_before_backward", "backward", "on_after_backward")
        and precision.pre_backward is Precision.pre_backward and precision.backward is Precision.backward
        and precision.post_backward is Precision.post_backward,
        plain_backward=precision._scale_loss is Precision._scale_loss,
        strategy_pre_backward=own.pre_backward is not base.pre_backward,
        strategy_post_backward=own.post_backward is not base.post_backward,
        own_precision_step=precision.optimizer_step is Precision.optimizer_step,
        nothing_after_closure=not strategy._clip_val
        and hooks.defaults_only("on_before_optimizer_step", "configure_gradient_clipping"),
    )  # fmt: skip


def runs_straight_through(
    strategy: Strategy, plan: _StepPlan, plain_methods: tuple[Callable[..., Any], ...]
) -> bool:
    """Whether ``strategy``'s training batches may run straight through under ``plan``: its ``training_step``,
    ``backward`` and ``optimizer_step`` are ``plain_methods`` (the base class's, taken before anything could
    patch them) and none is set on the instance, its precision's step is fulmen's, and the plan has nothing to
    run between the module's ``training_step`` and the optimizer's step."""
    return (
        step_methods(type(strategy)) == plain_methods
        and not set(_STRAIGHT_THROUGH_METHODS) & strategy.__dict__.keys()
        and type(strategy.precision_plugin)._optimizer_step is _PLAIN_PRECISION_STEP
        and plan.plain_forward and plan.inline_backward and plan.plain_backward
        and not (plan.strategy_pre_backward or plan.strategy_post_backward)
        and plan.own_precision_step and plan.nothing_after_closure
    )  # fmt: skip

"""``LightningOptimizer``: the user's optimizer, stepped through the trainer's precision and strategy."""

from __future__ import annotations

from collections.abc import Callable, Generator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch.optim import Optimizer

from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.types import LRSchedulerConfig as LRSchedulerConfig
from fulmen.utilities.types import Optimizable as Optimizable

if TYPE_CHECKING:
    from fulmen.strategies.strategy import Strategy


def do_nothing_closure() -> None:
    """The closure a step runs when it was given none (and the after-step callback when none is set)."""
    return None


class LightningOptimizer:
    """Wraps an optimizer so that ``step`` goes through precision (scaling, autocast) and the strategy.

    The wrapper passes ``isinstance(opt, type(user_optimizer))`` (its class is made a subclass of the
    wrapped optimizer's class), and every attribute not defined here is the wrapped optimizer's.
    """

    def __init__(self, optimizer: Optimizer) -> None:
        # Attributes not defined here (param_groups, state, defaults ...) are read from the wrapped optimizer
        # by __getattr__, so they stay right when it rebinds them (load_state_dict does). The class swap
        # below makes isinstance(wrapper, type(optimizer)) true.
        self._optimizer = optimizer
        self._strategy: Strategy | None = None
        self._on_after_step: Callable[[], None] = do_nothing_closure
        self.__class__ = type(
            "Lightning" + optimizer.__class__.__name__, (self.__class__, optimizer.__class__), {}
        )

    def __getattr__(self, name: str) -> Any:
        if name == "_optimizer":  # not yet set (unpickling): avoid infinite recursion
            raise AttributeError(name)
        return getattr(self._optimizer, name)

    @property
    def optimizer(self) -> Optimizer:
        return self._optimizer

    def count_steps(self, counter: Callable[[], None] | None) -> None:
        """Call ``counter`` after every ``step()`` (manual optimization counts its global steps this way)."""
        self._on_after_step = counter if counter is not None else do_nothing_closure

    @classmethod
    def _to_lightning_optimizer(cls, optimizer: Any, strategy: Strategy) -> LightningOptimizer:
        lightning_optimizer = optimizer if isinstance(optimizer, LightningOptimizer) else cls(optimizer)
        lightning_optimizer._strategy = strategy
        return lightning_optimizer

    @contextmanager
    def toggle_model(self, sync_grad: bool = True) -> Generator[None, None, None]:
        """Within this block only this optimizer's parameters require grad.

        ``sync_grad=False`` also skips gradient synchronisation across processes (DDP ``no_sync``), which
        saves communication on batches that only accumulate.
        """
        from fulmen.core.module import LightningModule

        strategy = self._strategy
        model = strategy.lightning_module if strategy is not None else None
        if not isinstance(model, LightningModule):
            yield
            return
        sync_ctx = strategy.block_backward_sync() if (strategy is not None and not sync_grad) else None
        model.toggle_optimizer(self)
        try:
            if sync_ctx is None:
                yield
            else:
                with sync_ctx:
                    yield
        finally:
            model.untoggle_optimizer(self)

    def step(self, closure: Callable[[], Any] | None = None, **kwargs: Any) -> Any:
        """Step the wrapped optimizer through the precision plugin.

        ``closure`` (when given) runs forward and backward; optimizers like LBFGS call it several times.
        """
        if closure is None:
            closure = do_nothing_closure
        elif not callable(closure):
            raise TypeError(f"LightningOptimizer.step(closure={closure!r}): the closure must be callable.")
        if self._strategy is None:
            step_output = self._optimizer.step(closure, **kwargs)  # type: ignore[arg-type]
        else:
            step_output = self._strategy.optimizer_step(self._optimizer, closure, **kwargs)
        self._on_after_step()
        return step_output

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self._optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._optimizer.load_state_dict(state_dict)

    def __repr__(self) -> str:
        return f"Lightning{self._optimizer!r}"  # "LightningSGD (\nParameter Group 0 ...", the class's own name


def unwrap_optimizer(optimizer: Optimizer | LightningOptimizer) -> Optimizer:
    """The user's optimizer, whether given as itself or in its ``LightningOptimizer`` wrapper."""
    return optimizer.optimizer if isinstance(optimizer, LightningOptimizer) else optimizer


class _MockOptimizer(Optimizer):
    """Stands in when ``configure_optimizers`` returns None: every call is a no-op."""

    def __init__(self) -> None:
        super().__init__([torch.zeros(1)], {})  # its one group is never added (add_param_group below)

    # it holds no parameter groups and no state: a scheduler built on it has nothing to schedule (libraries build
    # one to check a scheduler's arguments), and a checkpoint stores `{}` for it and restores nothing
    def add_param_group(self, param_group: dict[Any, Any]) -> None:
        pass

    def load_state_dict(self, state_dict: dict[Any, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        if closure is not None:
            return closure()
        return None

    def zero_grad(self, set_to_none: bool | None = True) -> None:
        pass

    def __repr__(self) -> str:
        return "No Optimizer"


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "is_param_in_hook_signature": "fulmen.utilities.signature_utils.is_param_in_hook_signature",
    # Lightning's private steps of parsing configure_optimizers' return (fulmen.core.configure_optimizers holds them)
    "_configure_optimizers": "fulmen.core.configure_optimizers._configure_optimizers",
    "_configure_schedulers_automatic_opt": "fulmen.core.configure_optimizers._configure_schedulers_automatic_opt",
    "_configure_schedulers_manual_opt": "fulmen.core.configure_optimizers._configure_schedulers_manual_opt",
    "_init_optimizers_and_lr_schedulers": "fulmen.core.configure_optimizers._init_optimizers_and_lr_schedulers",
})  # fmt: skip

"""Lightning's forward redirection: a step run through the forward of a model that wraps the module, so that
whatever the wrapper does around its inner module's forward happens around the step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def _redirect(wrapper: torch.nn.Module, module: torch.nn.Module, step: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``step(*args, **kwargs)`` through ``wrapper``'s forward (Lightning's forward redirection): the
    module's ``forward`` is replaced for one call by one that puts it back and runs the step, so whatever the
    wrapper does around its inner module's forward (a compiled graph, hooks ...) happens around the step."""
    state = module.__dict__
    own = state.get("forward")  # an instance's own forward (usually none: the class's)

    def restore() -> None:
        if own is None:
            state.pop("forward", None)
        else:
            state["forward"] = own

    def forward(*inner_args: Any, **inner_kwargs: Any) -> Any:
        restore()  # the step may call the real forward
        return step(*inner_args, **inner_kwargs)

    state["forward"] = forward
    try:
        return wrapper(*args, **kwargs)
    finally:
        restore()

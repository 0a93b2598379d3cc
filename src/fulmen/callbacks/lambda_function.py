"""``LambdaCallback``: a callback from plain functions, one per hook, for quick experiments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fulmen.callbacks.callback import Callback

# Every hook a LambdaCallback can take, in Callback's order; the keyword names are the hook names.
HOOKS = (
    "setup", "teardown", "on_fit_start", "on_fit_end", "on_sanity_check_start", "on_sanity_check_end",
    "on_train_batch_start", "on_train_batch_end", "on_train_epoch_start", "on_train_epoch_end",
    "on_validation_epoch_start", "on_validation_epoch_end", "on_test_epoch_start", "on_test_epoch_end",
    "on_validation_batch_start", "on_validation_batch_end", "on_test_batch_start", "on_test_batch_end",
    "on_train_start", "on_train_end", "on_validation_start", "on_validation_end", "on_test_start", "on_test_end",
    "on_exception", "on_save_checkpoint", "on_load_checkpoint", "on_before_backward", "on_after_backward",
    "on_before_optimizer_step", "on_before_zero_grad", "on_predict_start", "on_predict_end",
    "on_predict_batch_start", "on_predict_batch_end", "on_predict_epoch_start", "on_predict_epoch_end",
)  # fmt: skip


class LambdaCallback(Callback):
    """Run ``fn(trainer, pl_module, ...)`` at a hook: ``LambdaCallback(on_train_epoch_end=lambda t, m: ...)``.

    Each keyword is a hook name and receives exactly that hook's arguments. A hook left as None keeps the
    base class's no-op, so the dispatcher skips it as it skips any hook a callback does not implement."""

    def __init__(self, **hooks: Callable[..., Any] | None) -> None:
        unknown = sorted(set(hooks) - set(HOOKS))
        if unknown:
            raise TypeError(
                f"LambdaCallback got {', '.join(map(repr, unknown))}: not a hook it can run. "
                f"Hooks: {', '.join(HOOKS)}."
            )
        for name, fn in hooks.items():
            if fn is None:
                continue
            if not callable(fn):
                raise TypeError(f"LambdaCallback({name}={fn!r}): expected a callable.")
            setattr(self, name, fn)

"""``LambdaCallback``: a callback from plain functions, one per hook, for quick experiments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fulmen.core.hooks import Callback

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

    def __init__(
        self,
        setup: Callable[..., Any] | None = None,
        teardown: Callable[..., Any] | None = None,
        on_fit_start: Callable[..., Any] | None = None,
        on_fit_end: Callable[..., Any] | None = None,
        on_sanity_check_start: Callable[..., Any] | None = None,
        on_sanity_check_end: Callable[..., Any] | None = None,
        on_train_batch_start: Callable[..., Any] | None = None,
        on_train_batch_end: Callable[..., Any] | None = None,
        on_train_epoch_start: Callable[..., Any] | None = None,
        on_train_epoch_end: Callable[..., Any] | None = None,
        on_validation_epoch_start: Callable[..., Any] | None = None,
        on_validation_epoch_end: Callable[..., Any] | None = None,
        on_test_epoch_start: Callable[..., Any] | None = None,
        on_test_epoch_end: Callable[..., Any] | None = None,
        on_validation_batch_start: Callable[..., Any] | None = None,
        on_validation_batch_end: Callable[..., Any] | None = None,
        on_test_batch_start: Callable[..., Any] | None = None,
        on_test_batch_end: Callable[..., Any] | None = None,
        on_train_start: Callable[..., Any] | None = None,
        on_train_end: Callable[..., Any] | None = None,
        on_validation_start: Callable[..., Any] | None = None,
        on_validation_end: Callable[..., Any] | None = None,
        on_test_start: Callable[..., Any] | None = None,
        on_test_end: Callable[..., Any] | None = None,
        on_exception: Callable[..., Any] | None = None,
        on_save_checkpoint: Callable[..., Any] | None = None,
        on_load_checkpoint: Callable[..., Any] | None = None,
        on_before_backward: Callable[..., Any] | None = None,
        on_after_backward: Callable[..., Any] | None = None,
        on_before_optimizer_step: Callable[..., Any] | None = None,
        on_before_zero_grad: Callable[..., Any] | None = None,
        on_predict_start: Callable[..., Any] | None = None,
        on_predict_end: Callable[..., Any] | None = None,
        on_predict_batch_start: Callable[..., Any] | None = None,
        on_predict_batch_end: Callable[..., Any] | None = None,
        on_predict_epoch_start: Callable[..., Any] | None = None,
        on_predict_epoch_end: Callable[..., Any] | None = None,
    ) -> None:
        given = locals()
        for name in HOOKS:
            fn = given[name]
            if fn is None:
                continue
            if not callable(fn):
                raise TypeError(f"LambdaCallback({name}={fn!r}): expected a callable, or None to leave the hook out.")
            setattr(self, name, fn)

"""Numerical precision: how forward runs (autocast, dtype), how backward scales and how steps happen.

One object per precision answers "how do I run forward / backward / step / clip" so that the loops never
branch on the precision flag.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Generator
from typing import Any

import torch
from torch import Tensor
from torch.optim import LBFGS, Optimizer

from fulmen.utilities.apply_func import apply_to_collection
from fulmen.utilities.exceptions import InvalidValueError, MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_warn

_NO_CONTEXT = contextlib.nullcontext()  # reusable: one object, not one per forward

_PRECISIONS = ("64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true")
_LEGACY = {
    64: "64-true",
    "64": "64-true",
    32: "32-true",
    "32": "32-true",
    16: "16-mixed",
    "16": "16-mixed",
    "bf16": "bf16-mixed",
}


def normalize_precision(precision: Any) -> str:
    """Map every accepted spelling to one of :data:`_PRECISIONS`; warn for the 1.x spellings 16/bf16."""
    if precision is None:
        return "32-true"
    if isinstance(precision, str) and precision in _PRECISIONS:
        return precision
    if not isinstance(precision, bool) and precision in _LEGACY:
        new = _LEGACY[precision]
        if str(precision) in ("16", "bf16"):
            rank_zero_warn(
                f"precision={precision!r} is the 1.x spelling and still works; it means {new!r}. "
                f"Write precision={new!r} to silence this warning."
            )
        return new
    raise InvalidValueError(
        f"precision={precision!r} is not supported. Use one of {list(_PRECISIONS)} "
        "(or the older spellings 16, 32, 64, '16', '32', '64', 'bf16')."
    )


class Precision:
    """Full precision ('32-true'): plain forward and backward."""

    name = "32-true"

    @property
    def precision(self) -> str:
        """The precision flag this object implements, e.g. ``'16-mixed'`` (Lightning's attribute name)."""
        return self.name

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return module

    def convert_input(self, data: Any) -> Any:
        return data

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return _NO_CONTEXT

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        """Where tensors are created in the precision's dtype (``configure_model`` runs in it)."""
        return _NO_CONTEXT

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return self.tensor_init_context()

    def pre_backward(self, tensor: Tensor) -> Tensor:
        return tensor

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        pass

    def optimizer_step(
        self,
        optimizer: Optimizer,
        closure: Callable[[], Any],
        after_closure: Callable[[Optimizer], None] | None,
        **kwargs: Any,
    ) -> Any:
        """Step ``optimizer``; ``after_closure`` (hooks, clipping) runs between backward and the step."""
        first = _CLOSURE_FIRST.get(type(optimizer))
        if first or (first is None and _closure_runs_first(optimizer)):
            # what optimizer.step(closure) would do, without its closure plumbing (grad mode switches
            # and a frame per call: about 2% of a small model's step)
            result = closure()
            if after_closure is not None:
                after_closure(optimizer)
            optimizer.step(**kwargs)
            return result
        if after_closure is None:
            return optimizer.step(closure=closure, **kwargs)

        def wrapped() -> Any:
            result = closure()
            after_closure(optimizer)
            return result

        return optimizer.step(closure=wrapped, **kwargs)

    def clip_gradients(self, optimizer: Optimizer, clip_val: float, algorithm: str) -> None:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        if algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, clip_val)
        else:
            torch.nn.utils.clip_grad_norm_(params, clip_val)

    def step_was_skipped(self, optimizer: Optimizer) -> bool:
        """Whether the last ``optimizer_step`` of ``optimizer`` left its parameters unchanged (a gradient
        scaler found inf/NaN gradients): its learning-rate schedulers then do not step either."""
        return False

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


class DoublePrecision(Precision):
    """'64-true': float64 weights, floating inputs cast to float64, tensors created in forward too."""

    name = "64-true"
    dtype = torch.float64

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        # floating-point tensors only: `module.to(dtype)` would also cast complex buffers to a real dtype and
        # drop their imaginary part
        cast = {torch.float64: module.double, torch.float16: module.half, torch.bfloat16: module.bfloat16}
        return cast[self.dtype]()

    def convert_input(self, data: Any) -> Any:
        return apply_to_collection(
            data, Tensor, lambda t: t.to(self.dtype) if torch.is_floating_point(t) else t
        )

    @contextlib.contextmanager
    def forward_context(self) -> Generator[None, None, None]:
        previous = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)
        try:
            yield
        finally:
            torch.set_default_dtype(previous)

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return self.forward_context()  # the default dtype: also complex tensors get the matching width


class HalfPrecision(DoublePrecision):
    """'16-true' / 'bf16-true': weights and floating inputs in half precision, no autocast."""

    def __init__(self, precision: str = "16-true") -> None:
        if precision not in ("16-true", "bf16-true"):
            raise MisconfigurationException(
                f"HalfPrecision(precision={precision!r}) must be '16-true' or 'bf16-true'."
            )
        self.name = precision
        self.dtype = torch.float16 if precision == "16-true" else torch.bfloat16


class MixedPrecision(Precision):
    """'16-mixed' / 'bf16-mixed': autocast in forward; float16 on CUDA also scales the loss.

    With a GradScaler, gradients are unscaled before ``on_before_optimizer_step`` and clipping, so clip
    values mean the same as in full precision, and steps with inf/NaN gradients are skipped.
    """

    def __init__(self, precision: str | int, device: str, scaler: torch.amp.GradScaler | None = None) -> None:
        precision = {16: "16-mixed", "16": "16-mixed", "bf16": "bf16-mixed"}.get(precision, precision)  # 1.x
        if precision not in ("16-mixed", "bf16-mixed"):
            raise MisconfigurationException(
                f"MixedPrecision(precision={precision!r}) must be '16-mixed' or 'bf16-mixed'."
            )
        if scaler is not None and precision == "bf16-mixed":
            raise MisconfigurationException(
                "MixedPrecision(precision='bf16-mixed', scaler=...): bfloat16 has float32's range, so it needs "
                "no gradient scaler. Drop the scaler, or use precision='16-mixed'."
            )
        self.name = precision
        self.device = device
        self.dtype = torch.float16 if precision == "16-mixed" else torch.bfloat16
        if scaler is None and precision == "16-mixed" and device == "cuda":
            scaler = torch.amp.GradScaler("cuda")
        self.scaler = scaler
        self._unscaled: set[int] = set()
        # keyed by the optimizers themselves, weakly: an id() could be reused by a later run's optimizer
        self._stepped: weakref.WeakSet[Optimizer] = weakref.WeakSet()  # whose step ran (a post-hook adds)
        self._skipped: weakref.WeakSet[Optimizer] = weakref.WeakSet()  # whose last step the scaler skipped
        self._step_hooks: weakref.WeakKeyDictionary[Optimizer, Any] = weakref.WeakKeyDictionary()

    def __getstate__(self) -> dict[str, Any]:
        # the weak records of this process's optimizers do not pickle (ddp_spawn sends the trainer to its
        # workers) and mean nothing elsewhere: a copy starts with none
        state = dict(self.__dict__)
        for name in ("_stepped", "_skipped", "_step_hooks"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._stepped = weakref.WeakSet()
        self._skipped = weakref.WeakSet()
        self._step_hooks = weakref.WeakKeyDictionary()

    @property
    def device_type(self) -> str:
        return self.device

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return torch.autocast(self.device_type, dtype=self.dtype)

    def pre_backward(self, tensor: Tensor) -> Tensor:
        if self.scaler is not None:
            return self.scaler.scale(tensor)
        return tensor

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        if self.scaler is not None and id(optimizer) not in self._unscaled:
            self.scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    def optimizer_step(
        self,
        optimizer: Optimizer,
        closure: Callable[[], Any],
        after_closure: Callable[[Optimizer], None] | None,
        **kwargs: Any,
    ) -> Any:
        if self.scaler is None:
            return super().optimizer_step(optimizer, closure, after_closure, **kwargs)
        if isinstance(optimizer, LBFGS):
            raise MisconfigurationException(
                "precision='16-mixed' with a GradScaler cannot step LBFGS (it re-evaluates the closure). "
                "Use precision='bf16-mixed' or '32-true' with LBFGS."
            )
        result = closure()
        self.unscale_gradients(optimizer)
        if after_closure is not None:
            after_closure(optimizer)
        self._unscaled.discard(id(optimizer))
        if result is None and getattr(closure, "skip_step_without_loss", False):
            return None  # automatic optimization and training_step returned None: nothing to step
        if optimizer not in self._step_hooks:  # tells whether the scaler let the step run, without a sync
            stepped = self._stepped
            self._step_hooks[optimizer] = optimizer.register_step_post_hook(
                lambda opt, args, kwargs: stepped.add(opt)
            )
        self._stepped.discard(optimizer)
        step_output = self.scaler.step(optimizer, **kwargs)
        self.scaler.update()
        if optimizer in self._stepped:
            self._skipped.discard(optimizer)
        else:
            self._skipped.add(optimizer)
        return step_output

    def step_was_skipped(self, optimizer: Optimizer) -> bool:
        return optimizer in self._skipped

    def clip_gradients(self, optimizer: Optimizer, clip_val: float, algorithm: str) -> None:
        self.unscale_gradients(optimizer)
        super().clip_gradients(optimizer, clip_val, algorithm)

    def state_dict(self) -> dict[str, Any]:
        # a GradScaler's state is the scale and its growth tracker: what makes a resumed run exact
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.scaler is not None and state_dict:
            self.scaler.load_state_dict(state_dict)


_CLOSURE_FIRST: dict[type, bool] = {}


def _closure_runs_first(optimizer: Optimizer) -> bool:
    """Whether ``optimizer.step(closure)`` just calls the closure once before stepping: true of torch's own
    optimizers except LBFGS. Others (LBFGS, SAM-like optimizers of other libraries) get the closure."""
    cls = type(optimizer)
    known = _CLOSURE_FIRST.get(cls)
    if known is None:
        known = _CLOSURE_FIRST[cls] = cls.__module__.startswith("torch.optim.") and not issubclass(cls, LBFGS)
    return known


def select_precision(precision: str, device_type: str) -> Precision:
    """The precision object for a normalised flag on a device type."""
    if precision == "32-true":
        return Precision()
    if precision == "64-true":
        if device_type == "mps":
            raise MisconfigurationException("precision='64-true' is not supported on MPS; use '32-true'.")
        return DoublePrecision()
    if precision in ("16-true", "bf16-true"):
        return HalfPrecision(precision)
    if precision == "16-mixed" and device_type == "cpu":
        rank_zero_warn(
            "precision='16-mixed' on the CPU: float16 autocast is not supported there, so 'bf16-mixed' is "
            "used instead. Pass precision='bf16-mixed' to silence this warning."
        )
        precision = "bf16-mixed"
    return MixedPrecision(precision, device_type)

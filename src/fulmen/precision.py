"""Numerical precision: how forward runs (autocast, dtype), how backward scales and how steps happen.

One object per precision answers "how do I run forward / backward / step / clip" so that the loops never
branch on the precision flag.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.optim import LBFGS, Optimizer

from fulmen.core.hooks import CheckpointHooks
from fulmen.utilities.apply_func import apply_to_collection
from fulmen.utilities.enums import GradClipAlgorithmType
from fulmen.utilities.exceptions import InvalidValueError, MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from collections.abc import Iterator

    from torch.nn import Module

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


class Precision(CheckpointHooks):
    """Full precision ('32-true'): plain forward and backward.

    Lightning's hooks are here with Lightning's signatures and moments: :meth:`pre_backward` (the loss, scaled
    where the precision scales it, then ``on_before_backward``), :meth:`backward` (the module's ``backward``),
    :meth:`post_backward` (``on_after_backward``), :meth:`optimizer_step` (the closure, then
    ``on_before_optimizer_step`` and gradient clipping, then the step), the ``*_step_context`` managers the
    steps run in, :meth:`connect` and :meth:`teardown`. A subclass overriding one is called at that moment;
    the strategy runs the defaults inline otherwise (see ``Strategy._step_plan``).
    """

    name = "32-true"
    # the strategy this object serves in a run (Strategy.connect_run sets it): the hooks of pre_backward,
    # backward, post_backward and optimizer_step are called through its dispatcher; None outside a run
    _strategy: Any = None

    @property
    def compute_dtype(self) -> torch.dtype:
        """The dtype the model's matrix products compute in: what ``ThroughputMonitor`` looks the device's peak
        FLOPs up for (float32 here; each precision that computes in another says so)."""
        return torch.float32

    def __getstate__(self) -> dict[str, Any]:
        # the strategy travels on its own (a ddp_spawn worker's run links it again in connect_run)
        state = dict(self.__dict__)
        state.pop("_strategy", None)
        return state

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

    def convert_output(self, data: Any) -> Any:
        """Outputs in the dtype expected after the model's forward (nothing to do at full precision)."""
        return data

    def connect(
        self, model: Module, optimizers: list[Optimizer], lr_schedulers: list[Any]
    ) -> tuple[Module, list[Optimizer], list[Any]]:
        """Called once the strategy set up the model and the optimizers (``Strategy.setup_precision_plugin``):
        returns the model, optimizers and learning-rate scheduler configurations to train with (a subclass may
        wrap them)."""
        return model, optimizers, lr_schedulers

    # -- the steps' contexts (Lightning's): each runs its step in ``forward_context`` by default --------------
    def train_step_context(self) -> contextlib.AbstractContextManager[Any]:
        """The context ``training_step`` runs in."""
        return self.forward_context()

    def val_step_context(self) -> contextlib.AbstractContextManager[Any]:
        """The context ``validation_step`` runs in."""
        return self.forward_context()

    def test_step_context(self) -> contextlib.AbstractContextManager[Any]:
        """The context ``test_step`` runs in."""
        return self.forward_context()

    def predict_step_context(self) -> contextlib.AbstractContextManager[Any]:
        """The context ``predict_step`` runs in."""
        return self.forward_context()

    # -- backward ------------------------------------------------------------------------------------------
    def _scale_loss(self, tensor: Tensor) -> Tensor:
        """The loss backward runs on (a gradient scaler multiplies it; full precision leaves it)."""
        return tensor

    def _call_hooks(self, name: str, *args: Any) -> None:
        """Hook ``name`` of the callbacks, then of the module, in the run this object serves (none outside one)."""
        strategy = self._strategy
        hooks = strategy._hooks if strategy is not None else None
        if hooks is not None:
            hooks.call_callbacks(name, *args)
            hooks.call_module(name, *args)

    def pre_backward(self, tensor: Tensor, module: Module | None) -> Tensor:
        """Before backward: the loss scaled where this precision scales it, then ``on_before_backward`` (the
        callbacks', then the module's) with it. Returns the tensor to back-propagate."""
        tensor = self._scale_loss(tensor)
        self._call_hooks("on_before_backward", tensor)
        return tensor

    def backward(
        self, tensor: Tensor, model: Module | None, optimizer: Optimizer | None, *args: Any, **kwargs: Any
    ) -> None:
        """The backward pass: the module's ``backward(tensor, *args, **kwargs)`` hook (``optimizer``: the one
        being stepped, ``None`` under manual optimization); ``tensor.backward`` for a plain module."""
        strategy = self._strategy
        if strategy is not None and strategy._hooks is not None:
            strategy._module_backward(tensor, optimizer, *args, **kwargs)  # the dispatcher: 1.x signatures too
            return
        module_backward = getattr(model, "backward", None)
        if callable(module_backward):
            module_backward(tensor, *args, **kwargs)
        else:
            tensor.backward(*args, **kwargs)

    def post_backward(self, tensor: Tensor, module: Module | None) -> Tensor:
        """After backward: ``on_after_backward`` (the callbacks', then the module's). Returns the loss detached
        (the graph is released)."""
        closure_loss = tensor.detach()
        self._call_hooks("on_after_backward")
        return closure_loss

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        pass

    def optimizer_step(self, optimizer: Optimizer, model: Module | None, closure: Callable[[], Any], **kwargs: Any) -> Any:
        """Step ``optimizer``: ``closure`` (training_step and backward), then ``on_before_optimizer_step`` and
        gradient clipping, then the step (``kwargs``: ``optimizer.step``'s)."""
        strategy = self._strategy
        after = strategy._after_closure if strategy is not None and strategy._hooks is not None else None
        return self._optimizer_step(optimizer, closure, after, **kwargs)

    def _optimizer_step(
        self,
        optimizer: Optimizer,
        closure: Callable[[], Any],
        after_closure: Callable[[Optimizer], None] | None,
        **kwargs: Any,
    ) -> Any:
        """Step ``optimizer``; ``after_closure`` (hooks, clipping) runs between backward and the step."""
        first = _CLOSURE_FIRST.get(type(optimizer))
        if first or (first is None and closure_runs_first(optimizer)):
            # what optimizer.step(closure) would do, without its closure plumbing (grad mode switches
            # and a frame per call: about 2% of a small model's step)
            result = closure()
            if after_closure is not None:
                after_closure(optimizer)
            if kwargs:
                optimizer.step(**kwargs)
            else:  # no argument unpacking: the plain call is the cheaper one, at every step
                optimizer.step()
            return result
        if after_closure is None:
            return optimizer.step(closure=closure, **kwargs)

        def wrapped() -> Any:
            result = closure()
            after_closure(optimizer)
            return result

        return optimizer.step(closure=wrapped, **kwargs)

    def clip_gradients(
        self,
        optimizer: Optimizer,
        clip_val: int | float = 0.0,
        gradient_clip_algorithm: GradClipAlgorithmType | str = GradClipAlgorithmType.NORM,
    ) -> None:
        """Clip ``optimizer``'s gradients (none when ``clip_val`` <= 0): their total norm (``'norm'``, with
        :meth:`clip_grad_by_norm`) or each element (``'value'``, :meth:`clip_grad_by_value`) to ``clip_val``,
        after :meth:`unscale_gradients` (a gradient scaler's: clip values mean what they mean at full precision)."""
        if clip_val <= 0:
            return
        self.unscale_gradients(optimizer)
        if gradient_clip_algorithm == GradClipAlgorithmType.VALUE:
            self.clip_grad_by_value(optimizer, clip_val)
        elif gradient_clip_algorithm == GradClipAlgorithmType.NORM:
            self.clip_grad_by_norm(optimizer, clip_val)

    def clip_grad_by_value(self, optimizer: Optimizer, clip_val: int | float) -> None:
        """Clamp each gradient element of :meth:`main_params` to ``[-clip_val, clip_val]``."""
        torch.nn.utils.clip_grad_value_(self.main_params(optimizer), clip_value=clip_val)

    def clip_grad_by_norm(self, optimizer: Optimizer, clip_val: int | float) -> None:
        """Scale the gradients of :meth:`main_params` so that their total L2 norm is at most ``clip_val``."""
        torch.nn.utils.clip_grad_norm_(self.main_params(optimizer), clip_val)

    def main_params(self, optimizer: Optimizer) -> Iterator[Tensor]:
        """The parameters ``optimizer`` steps (what clipping reads): those of its parameter groups."""
        for group in optimizer.param_groups:
            yield from group["params"]

    def step_was_skipped(self, optimizer: Optimizer) -> bool:
        """Whether the last ``optimizer_step`` of ``optimizer`` left its parameters unchanged (a gradient
        scaler found inf/NaN gradients): its learning-rate schedulers then do not step either."""
        return False

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass

    def teardown(self) -> None:
        """Called when the run ends (``Strategy.teardown``): release what the precision held."""


class DoublePrecision(Precision):
    """'64-true': float64 weights, floating inputs cast to float64, tensors created in forward too."""

    name = "64-true"
    dtype = torch.float64

    @property
    def compute_dtype(self) -> torch.dtype:
        """``dtype``: this precision's matrix products run in it."""
        return self.dtype

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

    @property
    def compute_dtype(self) -> torch.dtype:
        """``dtype``: this precision's matrix products run in it."""
        return self.dtype

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
        state = super().__getstate__()
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

    def autocast_context_manager(self) -> torch.autocast:
        """The autocast context the steps run in (Lightning's: without the weight cache)."""
        return torch.autocast(self.device_type, dtype=self.dtype, cache_enabled=False)

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return self.autocast_context_manager()

    def _scale_loss(self, tensor: Tensor) -> Tensor:
        if self.scaler is not None:
            return self.scaler.scale(tensor)
        return tensor

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        if self.scaler is not None and id(optimizer) not in self._unscaled:
            self.scaler.unscale_(optimizer)
            self._unscaled.add(id(optimizer))

    def _optimizer_step(
        self,
        optimizer: Optimizer,
        closure: Callable[[], Any],
        after_closure: Callable[[Optimizer], None] | None,
        **kwargs: Any,
    ) -> Any:
        if self.scaler is None:
            return super()._optimizer_step(optimizer, closure, after_closure, **kwargs)
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

    def state_dict(self) -> dict[str, Any]:
        # a GradScaler's state is the scale and its growth tracker: what makes a resumed run exact
        return self.scaler.state_dict() if self.scaler is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.scaler is not None and state_dict:
            self.scaler.load_state_dict(state_dict)


_CLOSURE_FIRST: dict[type, bool] = {}


def closure_runs_first(optimizer: Optimizer) -> bool:
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

"""The one hook dispatcher: every callback, module and data-module hook is called from here.

Calling through one place is what gives hooks a single, testable order and sets ``_current_fx_name`` (which
``self.log`` reads). Hooks whose implementation is the base class's no-op are skipped, computed once per
run, so that unused hooks cost nothing in the hot loop. With a profiler, ``ProfilingHookDispatcher`` records
each hook (and the loop stages the loops hand it through ``profiled`` / ``profile``).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import torch

from fulmen.core.datamodule import LightningDataModule
from fulmen.core.hooks import CheckpointHooks, DataHooks, ModelHooks
from fulmen.core.module import LightningModule
from fulmen.utilities.apply_func import move_data_to_device
from fulmen.utilities.model_helpers import assigned_on_instance, is_overridden

if TYPE_CHECKING:
    from fulmen.runtime.context import RunContext
    from fulmen.runtime.protocols import RunCallback, RunProfiler

_T = TypeVar("_T")

# Module hooks whose base implementation does nothing: skipping them changes nothing.
_NOOP_MODULE_HOOKS = frozenset(
    name
    for base in (ModelHooks, CheckpointHooks)
    for name, fn in vars(base).items()
    if callable(fn) and not name.startswith("_") and name.startswith("on_") and "model_" not in name
) | {"prepare_data", "setup", "teardown", "configure_model", "configure_sharded_model"}

# 1.x hooks 2.x no longer calls: run only for a class that defines its own (not for a wrapper of the default)
_ONLY_IF_OVERRIDDEN = frozenset({"configure_sharded_model"})

# Hooks that Lightning 1.x called with the optimizer's index: name -> (where the index goes among the
# arguments, how many positional parameters the 2.x signature has). An override is called the 1.x way when
# it names ``optimizer_idx``/``opt_idx`` or takes more positional parameters than the 2.x form.
_IDX_HOOKS: dict[str, tuple[int, int]] = {
    "optimizer_step": (3, 4),  # (epoch, batch_idx, optimizer, [optimizer_idx,] optimizer_closure)
    "optimizer_zero_grad": (3, 3),  # (epoch, batch_idx, optimizer, [optimizer_idx])
    "configure_gradient_clipping": (1, 3),  # (optimizer, [optimizer_idx,] gradient_clip_val, algorithm)
    "on_before_optimizer_step": (1, 1),  # (optimizer, [optimizer_idx])
    "lr_scheduler_step": (1, 2),  # (scheduler, [optimizer_idx,] metric)
    "backward": (1, 1),  # (loss, [optimizer, optimizer_idx,] *args): called by Strategy.backward
}
_IDX_NAMES = frozenset({"optimizer_idx", "opt_idx"})
# keyword arguments 1.x passed to optimizer_step overrides
_LEGACY_STEP_KWARGS = ("on_tpu", "using_native_amp", "using_lbfgs")


def takes_optimizer_idx(
    fn: Callable[..., Any], positional_2x: int, names: frozenset[str] = _IDX_NAMES
) -> bool:
    """Whether ``fn`` (a bound hook) has the 1.x signature that receives the optimizer's index."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    if any(p.name in names for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) > positional_2x


class OptimizerIdxParameter(NamedTuple):
    named: bool  # training_step names ``optimizer_idx``
    accepted: bool  # by name or through ``*args``
    required: bool  # named, without a default


def training_step_takes_optimizer_idx(module: Any) -> OptimizerIdxParameter:
    """How ``module.training_step`` takes the 1.x ``optimizer_idx`` argument (read once per fit)."""
    params = inspect.signature(module.training_step).parameters
    named = params.get("optimizer_idx")
    accepted = named is not None or any(p.kind is p.VAR_POSITIONAL for p in params.values())
    return OptimizerIdxParameter(named is not None, accepted, named is not None and named.default is inspect.Parameter.empty)


def _accepted_kwargs(fn: Callable[..., Any], names: tuple[str, ...]) -> tuple[str, ...]:
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return names
    return tuple(n for n in names if n in params)


class HookDispatcher:
    """Calls hooks on the trainer's callbacks, LightningModule and LightningDataModule."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self._callback_cache: dict[tuple[str, bool | None], list[Callable[..., Any]]] = {}
        self._module_cache: dict[str, Callable[..., Any] | None] = {}
        self._legacy_cache: dict[Any, bool] = {}
        self._default_cache: dict[tuple[str, ...], bool] = {}
        # bumped by reset(): whoever caches answers of this dispatcher (the strategy's step plan) re-asks
        self.generation = 0

    # -- profiling (ProfilingHookDispatcher records; this one runs everything as is, at no cost) ---------
    profiler: RunProfiler | None = None

    def profiled(self, action: str, fn: Callable[..., _T]) -> Callable[..., _T]:
        """``fn``, recorded as ``action`` when a profiler runs: loops wrap their stages once per epoch."""
        return fn

    def profile(self, action: str) -> contextlib.AbstractContextManager[Any]:
        """A block recorded as ``action`` when a profiler runs (for per-epoch / per-run stages only)."""
        return contextlib.nullcontext()

    def reset(self) -> None:
        """Forget which hooks are overridden: call when callbacks or the module change (each run)."""
        self.generation += 1
        self._callback_cache.clear()
        self._module_cache.clear()
        self._legacy_cache.clear()
        self._default_cache.clear()

    def defaults_only(self, *names: str) -> bool:
        """No callback implements any of ``names`` and the module overrides none of them, so the loops
        may run the default behaviour inline (the hot loop skips several calls per step this way)."""
        cached = self._default_cache.get(names)  # per step: a lookup, no closure made
        if cached is None:
            cached = self._cached_default(
                names, lambda name: self.module_overrides(name) or bool(self._callback_fns(name, None))
            )
        return cached

    def _cached_default(self, names: tuple[str, ...], overridden: Callable[[str], bool]) -> bool:
        cached = self._default_cache.get(names)
        if cached is None:
            cached = self._default_cache[names] = not any(overridden(name) for name in names)
        return cached

    # -- 1.x signatures that take the optimizer's index (each override's signature is read once per run) --
    def module_takes_optimizer_idx(self, name: str) -> bool:
        """Whether the module overrides hook ``name`` with its 1.x signature."""
        legacy = self._legacy_cache.get(name)
        if legacy is None:
            fn = self._module_fn(name)
            names = _IDX_NAMES | {"optimizer"} if name == "backward" else _IDX_NAMES
            legacy = (
                fn is not None  # fulmen's own defaults (also wrapped on the instance) take the 2.x form
                and is_overridden(name, self.context.module, LightningModule)
                and takes_optimizer_idx(fn, _IDX_HOOKS[name][1], names)
            )
            self._legacy_cache[name] = legacy
        return legacy

    def _callback_takes_optimizer_idx(self, name: str, fn: Callable[..., Any]) -> bool:
        legacy = self._legacy_cache.get((name, fn))
        if legacy is None:  # callbacks' hooks also take (trainer, pl_module) first
            legacy = self._legacy_cache[(name, fn)] = takes_optimizer_idx(fn, _IDX_HOOKS[name][1] + 2)
        return legacy

    def call_module_idx(self, name: str, optimizer_idx: Callable[[], int], *args: Any, **kwargs: Any) -> Any:
        """Call a module hook that 1.x called with the optimizer index, in whichever form it overrides.

        ``optimizer_idx`` is a function so that the index is only looked up for 1.x overrides.
        """
        if self.module_takes_optimizer_idx(name):
            pos = _IDX_HOOKS[name][0]
            idx = optimizer_idx()
            if name == "optimizer_step":
                fn = self._module_fn(name)
                assert fn is not None
                legacy_kwargs = {
                    "on_tpu": False,
                    "using_lbfgs": isinstance(args[2], torch.optim.LBFGS),
                    "using_native_amp": self.context.strategy.precision_plugin.name in ("16-mixed", "bf16-mixed"),
                }
                for key in _accepted_kwargs(fn, _LEGACY_STEP_KWARGS):
                    kwargs.setdefault(key, legacy_kwargs[key])
            args = (*args[:pos], idx, *args[pos:])
        return self.call_module(name, *args, **kwargs)

    def call_callbacks_idx(self, name: str, optimizer_idx: Callable[[], int], *args: Any) -> None:
        """``call_callbacks`` for ``on_before_optimizer_step``: 1.x callbacks also receive the index."""
        fns = self._callback_fns(name, None)
        if not fns:
            return
        legacy = [self._callback_takes_optimizer_idx(name, fn) for fn in fns]
        if not any(legacy):
            self._run_callbacks(name, fns, args, {})
            return
        with_idx = (*args, optimizer_idx())
        for fn, takes_idx in zip(fns, legacy):
            self._run_callbacks(name, [fn], with_idx if takes_idx else args, {})

    # -- callbacks ---------------------------------------------------------------------------------
    def _callback_fns(self, name: str, monitoring: bool | None) -> list[Callable[..., Any]]:
        key = (name, monitoring)
        fns = self._callback_cache.get(key)
        if fns is None:
            callbacks = self.context.callbacks
            if monitoring is not None:
                callbacks = [cb for cb in callbacks if _is_monitoring(cb) == monitoring]
            # the default is the Callback base class (found by is_overridden): the runtime layer does not
            # import the callbacks package, which sits above it
            fns = [self._callback_fn(cb, name) for cb in callbacks
                   if is_overridden(name, cb) or assigned_on_instance(name, cb)]  # fmt: skip
            self._callback_cache[key] = fns
        return fns

    def _callback_fn(self, callback: RunCallback, name: str) -> Callable[..., Any]:
        return getattr(callback, name)

    def call_callbacks(self, name: str, *args: Any, monitoring: bool | None = None, **kwargs: Any) -> None:
        fns = self._callback_fns(name, monitoring)
        if fns:
            self._run_callbacks(name, fns, args, kwargs)

    def _run_callbacks(
        self, name: str, fns: list[Callable[..., Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        trainer = self.context.trainer
        module = self.context.module
        # write to __dict__ directly: nn.Module.__setattr__ costs microseconds per hook in the hot loop
        state = module.__dict__ if module is not None else {}
        previous = state.get("_current_fx_name")
        state["_current_fx_name"] = name
        try:
            for fn in fns:
                fn(trainer, module, *args, **kwargs)
        finally:
            state["_current_fx_name"] = previous

    # -- the LightningModule ----------------------------------------------------------------------------
    def _module_fn(self, name: str) -> Callable[..., Any] | None:
        if name in self._module_cache:
            return self._module_cache[name]
        module = self.context.module
        fn: Callable[..., Any] | None = None
        if module is not None and (
            (name not in _NOOP_MODULE_HOOKS and name not in _ONLY_IF_OVERRIDDEN)
            or is_overridden(name, module, LightningModule)
            or (name not in _ONLY_IF_OVERRIDDEN and assigned_on_instance(name, module))
        ):
            fn = getattr(module, name, None)
        if fn is not None and name in _STEP_NAMES:
            fn = _fit_step_arguments(name, fn, type(module).__name__)
        self._module_cache[name] = fn
        return fn

    def call_module(self, name: str, *args: Any, **kwargs: Any) -> Any:
        fn = self._module_cache.get(name, _UNKNOWN)
        if fn is _UNKNOWN:
            fn = self._module_fn(name)
        if fn is None:
            return None
        state = self.context.module.__dict__  # see call_callbacks: no nn.Module.__setattr__
        previous = state.get("_current_fx_name")
        state["_current_fx_name"] = name
        try:
            return fn(*args, **kwargs)
        finally:
            state["_current_fx_name"] = previous

    def module_overrides(self, name: str) -> bool:
        """Whether the module implements ``name`` (its class overrides it, or the instance carries its own)."""
        module = self.context.module
        return module is not None and (
            is_overridden(name, module, LightningModule) or assigned_on_instance(name, module)
        )

    # -- the LightningDataModule ------------------------------------------------------------------------
    def call_datamodule(self, name: str, *args: Any, **kwargs: Any) -> Any:
        datamodule = self.context.datamodule
        if datamodule is None:
            return None
        if name in ("prepare_data", "setup", "teardown") and not is_overridden(name, datamodule, LightningDataModule):
            return None
        fn = getattr(datamodule, name, None)
        return fn(*args, **kwargs) if callable(fn) else None

    def datamodule_overrides(self, name: str) -> bool:
        datamodule = self.context.datamodule
        return datamodule is not None and is_overridden(name, datamodule, DataHooks)

    # -- composite: the batch-transfer hooks (data module's override wins, as in Lightning) ---------------
    def transfer_batch(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        default = self._default_cache.get(_TRANSFER_HOOKS)  # per batch: no call unless it is not known yet
        if default or (default is None and self._transfer_is_default()):
            return move_data_to_device(batch, device)
        for name, args in (
            ("on_before_batch_transfer", (dataloader_idx,)),
            ("transfer_batch_to_device", (device, dataloader_idx)),
            ("on_after_batch_transfer", (dataloader_idx,)),
        ):
            if self.datamodule_overrides(name):
                batch = self.call_datamodule(name, batch, *args)
            else:
                batch = self.call_module(name, batch, *args)
        return batch

    def transfer_is_default(self) -> bool:
        """No batch-transfer hook is overridden (module or data module): batches just move to the device."""
        return self._transfer_is_default()

    def _transfer_is_default(self) -> bool:
        return self._cached_default(
            _TRANSFER_HOOKS, lambda name: self.module_overrides(name) or self.datamodule_overrides(name)
        )


class ProfilingHookDispatcher(HookDispatcher):
    """The dispatcher of a run with a profiler: every hook it calls is recorded under Lightning's action
    names (``[Callback]<state_key>.<hook>``, ``[LightningModule]<Class>.<hook>``,
    ``[LightningDataModule]<Class>.<hook>``, and ``[Strategy]<Class>.<step>`` for the steps, backward and
    the batch transfer). No hook counts as a default here, so the loops dispatch every hook instead of
    running the defaults inline, and each one is timed, once. The plain dispatcher pays nothing for this:
    the wrapping is decided when the hook is first looked up in a run, not at every call."""

    def __init__(self, context: RunContext, profiler: RunProfiler) -> None:
        super().__init__(context)
        self.profiler: RunProfiler = profiler

    def profiled(self, action: str, fn: Callable[..., _T]) -> Callable[..., _T]:
        profiler = self.profiler

        @functools.wraps(fn)
        def recorded(*args: Any, **kwargs: Any) -> _T:
            with profiler.profile(action):
                return fn(*args, **kwargs)

        return recorded

    def profile(self, action: str) -> contextlib.AbstractContextManager[Any]:
        return self.profiler.profile(action)

    def _cached_default(self, names: tuple[str, ...], overridden: Callable[[str], bool]) -> bool:
        return False  # every hook dispatched, so every hook is recorded

    def _callback_fn(self, callback: RunCallback, name: str) -> Callable[..., Any]:
        key = getattr(callback, "state_key", type(callback).__qualname__)
        return self.profiled(f"[Callback]{key}.{name}", getattr(callback, name))

    def _module_fn(self, name: str) -> Callable[..., Any] | None:
        if name in self._module_cache:
            return self._module_cache[name]
        fn = super()._module_fn(name)
        if fn is not None:
            if name in _STRATEGY_ACTIONS:
                action = f"[Strategy]{type(self.context.strategy).__name__}.{name}"
            else:
                action = f"[LightningModule]{type(self.context.module).__name__}.{name}"
            fn = self._module_cache[name] = self.profiled(action, fn)
        return fn

    def call_datamodule(self, name: str, *args: Any, **kwargs: Any) -> Any:
        datamodule = self.context.datamodule
        if datamodule is None:
            return None
        with self.profiler.profile(f"[LightningDataModule]{type(datamodule).__name__}.{name}"):
            return super().call_datamodule(name, *args, **kwargs)

    def transfer_batch(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        with self.profiler.profile(f"[Strategy]{type(self.context.strategy).__name__}.batch_to_device"):
            return super().transfer_batch(batch, device, dataloader_idx)


# the module's hooks the strategy runs as its own steps: recorded under the strategy's name, as Lightning does
_STRATEGY_ACTIONS = frozenset({"training_step", "validation_step", "test_step", "predict_step", "backward"})

_STEP_NAMES = frozenset({"training_step", "validation_step", "test_step", "predict_step"})
_STAGE_LOADER = {"validation_step": "val_dataloader", "test_step": "test_dataloader", "predict_step": "predict_dataloader"}


def _fit_step_arguments(name: str, fn: Callable[..., Any], owner: str) -> Callable[..., Any]:
    """A step method that takes fewer positional arguments than the loop passes (``training_step(self,
    batch)``, common in tutorials) gets only those: ``batch_idx`` and ``dataloader_idx`` are passed when its
    signature has room for them, as Lightning does. Steps that take them all are returned unwrapped (the
    usual case pays nothing)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return fn
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return fn
    room = sum(p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params)
    # training_step gets (batch, batch_idx) (the 1.x optimizer_idx only when it asks for it); the evaluation
    # steps also get dataloader_idx with several loaders. Enough room: no wrapper, nothing paid per step.
    if room >= (2 if name == "training_step" else 3):
        return fn

    @functools.wraps(fn)
    def step(*args: Any, **kwargs: Any) -> Any:
        if len(args) > room:
            if len(args) >= 3 and room < 3 and name in _STAGE_LOADER:
                raise RuntimeError(
                    f"You provided multiple `{_STAGE_LOADER[name]}`, but no `dataloader_idx` argument in "
                    f"`{owner}.{name}()`. Try adding `dataloader_idx=0` to its signature."
                )
            args = args[:room]
        return fn(*args, **kwargs)

    return step


_UNKNOWN: Any = object()  # not looked up yet (None means: no such hook, or a default no-op)

_TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def _is_monitoring(callback: RunCallback) -> bool:
    """Callbacks that read metrics to decide (stop, save) run after the module's epoch-end hook."""
    return bool(getattr(callback, "_is_monitoring_callback", False))

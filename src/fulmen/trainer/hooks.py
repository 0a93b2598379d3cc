"""The one hook dispatcher: every callback, module and data-module hook is called from here.

Calling through one place is what gives hooks a single, testable order and sets ``_current_fx_name`` (which
``self.log`` reads). Hooks whose implementation is the base class's no-op are skipped, computed once per
run, so that unused hooks cost nothing in the hot loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fulmen.callbacks.callback import Callback
from fulmen.core.datamodule import LightningDataModule
from fulmen.core.hooks import CheckpointHooks, DataHooks, ModelHooks
from fulmen.core.module import LightningModule

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer

# Module hooks whose base implementation does nothing: skipping them changes nothing.
_NOOP_MODULE_HOOKS = frozenset(
    name
    for base in (ModelHooks, CheckpointHooks)
    for name, fn in vars(base).items()
    if callable(fn) and not name.startswith("_") and name.startswith("on_") and "model_" not in name
) | {"prepare_data", "setup", "teardown", "configure_model", "configure_sharded_model"}


def _overrides(obj: object, base: type, name: str) -> bool:
    if name in getattr(obj, "__dict__", {}):  # assigned on the instance
        return True
    return getattr(type(obj), name, None) is not getattr(base, name, None)


class HookDispatcher:
    """Calls hooks on the trainer's callbacks, LightningModule and LightningDataModule."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self._callback_cache: dict[tuple[str, bool | None], list[Callable[..., Any]]] = {}
        self._module_cache: dict[str, Callable[..., Any] | None] = {}

    def reset(self) -> None:
        """Forget which hooks are overridden: call when callbacks or the module change (each run)."""
        self._callback_cache.clear()
        self._module_cache.clear()

    # -- callbacks ---------------------------------------------------------------------------------
    def _callback_fns(self, name: str, monitoring: bool | None) -> list[Callable[..., Any]]:
        key = (name, monitoring)
        fns = self._callback_cache.get(key)
        if fns is None:
            callbacks = self.trainer.callbacks
            if monitoring is not None:
                callbacks = [cb for cb in callbacks if _is_monitoring(cb) == monitoring]
            fns = [getattr(cb, name) for cb in callbacks if _overrides(cb, Callback, name)]
            self._callback_cache[key] = fns
        return fns

    def call_callbacks(self, name: str, *args: Any, monitoring: bool | None = None, **kwargs: Any) -> None:
        fns = self._callback_fns(name, monitoring)
        if not fns:
            return
        trainer = self.trainer
        module = trainer.lightning_module
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
        module = self.trainer.lightning_module
        fn: Callable[..., Any] | None = None
        if module is not None and (
            name not in _NOOP_MODULE_HOOKS or _overrides(module, LightningModule, name)
        ):
            fn = getattr(module, name, None)
        self._module_cache[name] = fn
        return fn

    def call_module(self, name: str, *args: Any, **kwargs: Any) -> Any:
        fn = self._module_fn(name)
        if fn is None:
            return None
        state = self.trainer.lightning_module.__dict__  # see call_callbacks: no nn.Module.__setattr__
        previous = state.get("_current_fx_name")
        state["_current_fx_name"] = name
        try:
            return fn(*args, **kwargs)
        finally:
            state["_current_fx_name"] = previous

    def module_overrides(self, name: str) -> bool:
        module = self.trainer.lightning_module
        return module is not None and _overrides(module, LightningModule, name)

    # -- the LightningDataModule ------------------------------------------------------------------------
    def call_datamodule(self, name: str, *args: Any, **kwargs: Any) -> Any:
        datamodule = self.trainer.datamodule
        if datamodule is None:
            return None
        if name in ("prepare_data", "setup", "teardown") and not _overrides(
            datamodule, LightningDataModule, name
        ):
            return None
        fn = getattr(datamodule, name, None)
        return fn(*args, **kwargs) if callable(fn) else None

    def datamodule_overrides(self, name: str) -> bool:
        datamodule = self.trainer.datamodule
        return datamodule is not None and _overrides(datamodule, DataHooks, name)

    # -- composite: the batch-transfer hooks (data module's override wins, as in Lightning) ---------------
    def transfer_batch(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
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


def _is_monitoring(callback: Callback) -> bool:
    """Callbacks that read metrics to decide (stop, save) run after the module's epoch-end hook."""
    return bool(getattr(callback, "_is_monitoring_callback", False))

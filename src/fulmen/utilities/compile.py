"""``torch.compile`` and LightningModules: train the module itself with its forward and step methods compiled.

``torch.compile(module)`` returns an ``OptimizedModule`` wrapping the module; it is no ``LightningModule``
(``isinstance`` fails, hooks and checkpoints would see ``_orig_mod.`` names). :func:`from_compiled` turns it back
into the module, with ``forward`` and the ``*_step`` methods the user wrote replaced by their compiled versions;
:func:`to_uncompiled` undoes that. The Trainer does the same with a compiled module it is handed.

The module's ``_compiled_from`` field (declared by ``LightningModule``) holds the ``OptimizedModule`` while the
steps are compiled; the trainer reads it to know the module is compiled already.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import default_hooks_class, is_overridden

if TYPE_CHECKING:
    from torch._dynamo import OptimizedModule

    from fulmen.core.module import LightningModule

# forward and the steps: a training_step calling its layers directly (self.net(x), not self(x)) is compiled
# too, its loss included
_STEPS = ("forward", "training_step", "validation_step", "test_step", "predict_step")
_MISSING = object()
# module -> what each compiled method's name held on the instance before (usually nothing)
_REPLACED: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _is_lightning_module(obj: object) -> bool:
    # the class sits above this module; it registers itself when defined (before any instance can exist)
    lightning_module = default_hooks_class("LightningModule")
    return lightning_module is not None and lightning_module in type(obj).__mro__


def _is_optimized_module(obj: object) -> bool:
    from torch._dynamo import OptimizedModule

    return isinstance(obj, OptimizedModule)


def _plain_function(method: Callable[..., Any]) -> Callable[..., Any]:
    """A plain function calling ``method``: handing dynamo the bound method would make it look the method up on
    the module again, which is then the compiled wrapper (infinite recursion)."""

    @functools.wraps(method)  # its signature stays readable (the loops inspect training_step's arguments)
    def call(*args: Any, **kwargs: Any) -> Any:
        return method(*args, **kwargs)

    return call


def _compile_steps(compiled: Any, module: Any) -> Any:
    """``module`` with forward and the step methods its class overrides compiled by ``compiled``'s dynamo context
    (once: a module already unwrapped keeps its compiled methods)."""
    ctx = getattr(compiled, "dynamo_ctx", None)
    if ctx is not None and getattr(module, "_compiled_from", None) is None:
        replaced = {}
        for name in _STEPS:
            # a step the user did not write is left alone: the trainer sees it is not overridden and skips it
            if name != "forward" and not is_overridden(name, module):
                continue
            replaced[name] = module.__dict__.get(name, _MISSING)
            setattr(module, name, ctx(_plain_function(getattr(module, name))))
        _REPLACED[module] = replaced
    # bypass nn.Module.__setattr__: registering the wrapper as a submodule would make a cycle
    object.__setattr__(module, "_compiled_from", compiled)
    return module


def unwrap_compiled(model: Any) -> Any:
    """``model`` as the trainer runs it: a compiled LightningModule becomes the module with compiled steps (as
    :func:`from_compiled`); anything else is returned as it is."""
    module = getattr(model, "_orig_mod", None)
    if module is None or not _is_lightning_module(module):
        return model
    return _compile_steps(model, module)


def from_compiled(model: OptimizedModule) -> LightningModule:
    """The LightningModule that ``torch.compile`` wrapped in ``model``, its ``forward`` and ``*_step`` methods
    replaced by their compiled versions (changed in place): it trains compiled and is still a LightningModule."""
    if not _is_optimized_module(model):
        raise ValueError(
            f"`model` is required to be a `OptimizedModule`. Found a `{type(model).__name__}` instead: pass what "
            "`torch.compile(module)` returned."
        )
    module = model._orig_mod
    if not _is_lightning_module(module):
        raise ValueError(
            f"`model` is expected to be a compiled LightningModule. Found a `{type(module).__name__}` instead: "
            "from_compiled only unwraps `torch.compile(lightning_module)`."
        )
    return _compile_steps(model, module)


def to_uncompiled(model: LightningModule | OptimizedModule) -> LightningModule:
    """The LightningModule without compilation: from what ``torch.compile`` returned, or from a module that
    :func:`from_compiled` (or the Trainer) compiled, whose original methods are put back (in place)."""
    if _is_optimized_module(model):
        module: Any = model._orig_mod
        if not _is_lightning_module(module):
            raise TypeError(
                f"Unexpected error, the wrapped model should be a LightningModule, found {type(module).__name__}: "
                "to_uncompiled only unwraps `torch.compile(lightning_module)`."
            )
    elif _is_lightning_module(model):
        module = model
        if getattr(module, "_compiled_from", None) is None:
            raise ValueError(
                "`model` is required to be a compiled LightningModule. Found a non-compiled LightningModule "
                "instead: nothing to undo."
            )
    else:
        raise ValueError(
            "`model` must either be an instance of OptimizedModule or LightningModule, got "
            f"{type(model).__name__}."
        )
    for name, previous in _REPLACED.pop(module, {}).items():
        if previous is _MISSING:
            delattr(module, name)  # the class's method shows through again
        else:
            setattr(module, name, previous)
    object.__setattr__(module, "_compiled_from", None)
    return module


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "DDPStrategy": "fulmen.strategies.ddp.DDPStrategy",
    "DeepSpeedStrategy": "fulmen.strategies.deepspeed.DeepSpeedStrategy",
    "FSDPStrategy": "fulmen.strategies.fsdp.FSDPStrategy",
    "SingleDeviceStrategy": "fulmen.strategies.single_device.SingleDeviceStrategy",
    "Strategy": "fulmen.strategies.strategy.Strategy",
})  # fmt: skip

"""``is_overridden``: whether a user's class replaces one of fulmen's default hooks; ``get_torchvision_model``."""

from __future__ import annotations

import importlib.util
import inspect
from typing import TYPE_CHECKING, Any, TypeVar

from fulmen.utilities.imports import RequirementCache as RequirementCache

if TYPE_CHECKING:
    from torch import nn

# the classes whose methods are the hook defaults (LightningModule, LightningDataModule, Callback), by name. They
# sit above this module and add themselves when they are defined (`defines_default_hooks`): a class not defined
# yet has no instance to ask about.
_BASES: dict[str, type] = {}
_MISSING = object()

T = TypeVar("T", bound=type)


def defines_default_hooks(cls: T) -> T:
    """Class decorator: ``cls``'s methods are the defaults that :func:`is_overridden` compares against."""
    _BASES[cls.__name__] = cls
    return cls


def default_hooks_class(name: str) -> type | None:
    """The class named ``name`` that :func:`defines_default_hooks` registered (``"LightningModule"``), or None
    while it is not defined."""
    return _BASES.get(name)


def is_overridden(method_name: str, instance: object | None = None, parent: type[Any] | None = None) -> bool:
    """True when ``instance``'s class (or the instance itself) defines ``method_name`` differently from
    ``parent``, by default the fulmen base class it derives from (LightningModule, LightningDataModule or
    Callback).

    A method assigned on the instance counts by what it wraps (``functools.wraps`` / ``update_wrapper``):
    a wrapper around the default is not an override, and an attribute set to None switches the hook off.
    A ``Mock(spec=Callback)`` overrides everything (its methods record calls).
    """
    if instance is None:
        return False
    if parent is None:
        # `__class__`, not `type()`: a Mock made with spec= reports its spec class there
        parent = next(
            (c for c in instance.__class__.__mro__ if c in _BASES.values()), None
        )
        if parent is None:
            raise ValueError(
                f"is_overridden({method_name!r}, {type(instance).__name__}) needs parent=: the instance derives "
                "from none of LightningModule, LightningDataModule or Callback."
            )
    default = getattr(parent, method_name, None)
    own = getattr(instance, "__dict__", {}).get(method_name, _MISSING)
    target = own if own is not _MISSING else getattr(type(instance), method_name, None)
    if own is not _MISSING and callable(own):  # assigned on the instance: what does it wrap?
        target = inspect.unwrap(own)
    if target is None:  # switched off (on the instance or the class), or a wrapper of nothing
        return False
    return getattr(target, "__func__", target) is not default


def assigned_on_instance(method_name: str, instance: object) -> bool:
    """Whether ``instance`` carries its own callable ``method_name`` (a wrapper, a replacement), or is a
    ``unittest.mock`` object (whose methods record calls): the hook dispatcher runs such a method even when
    it is, or wraps, a default that would otherwise be skipped."""
    if is_mock(instance):
        return hasattr(instance, method_name)  # a spec'd mock has the names of its spec only
    return callable(getattr(instance, "__dict__", {}).get(method_name))


def is_mock(obj: object) -> bool:
    """A ``unittest.mock`` object (tests stand them in for callbacks and loggers); checked by module name so
    that ``unittest.mock`` is not imported."""
    return type(obj).__module__ == "unittest.mock"


def get_torchvision_model(model_name: str, **kwargs: Any) -> nn.Module:
    """``torchvision.models.get_model(model_name, **kwargs)``: a torchvision architecture by name (``"resnet18"``,
    ``weights=...``). Needs the ``torchvision`` package."""
    if importlib.util.find_spec("torchvision") is None:
        raise ModuleNotFoundError(
            f"get_torchvision_model({model_name!r}) needs the `torchvision` package, which is not installed: "
            "pip install torchvision (the release matching your torch)."
        )
    from torchvision import models

    return models.get_model(model_name, **kwargs)

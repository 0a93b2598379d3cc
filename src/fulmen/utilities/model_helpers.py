"""``is_overridden``: whether a user's class replaces one of fulmen's default hooks."""

from __future__ import annotations

from typing import Any

# the classes whose methods are the defaults (by qualified name: this module sits below them)
_BASES = frozenset({
    "fulmen.core.module.LightningModule",
    "fulmen.core.datamodule.LightningDataModule",
    "fulmen.callbacks.callback.Callback",
})  # fmt: skip


def is_overridden(method_name: str, instance: object | None = None, parent: type[Any] | None = None) -> bool:
    """True when ``instance``'s class (or the instance itself) defines ``method_name`` differently from
    ``parent``, by default the fulmen base class it derives from (LightningModule, LightningDataModule or
    Callback)."""
    if instance is None:
        return False
    if method_name in getattr(instance, "__dict__", {}):  # assigned on the instance
        return True
    if parent is None:
        parent = next((c for c in type(instance).__mro__ if f"{c.__module__}.{c.__qualname__}" in _BASES), None)
        if parent is None:
            raise ValueError(
                f"is_overridden({method_name!r}, {type(instance).__name__}) needs parent=: the instance derives "
                "from none of LightningModule, LightningDataModule or Callback."
            )
    return getattr(type(instance), method_name, None) is not getattr(parent, method_name, None)

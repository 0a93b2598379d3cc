"""``_NameRegistry``: the dict behind ``StrategyRegistry`` and ``AcceleratorRegistry`` (name -> how to build it).

An entry is ``{kind: class, f"{kind}_name": name, "init_params": {...}, "description": str}``, where ``kind`` is
``"strategy"`` or ``"accelerator"``. A subclass names ``_kind`` and the order its entries list their keys in, and
keeps its own ``register`` (its argument names and the errors it raises), ``available_*`` and ``__str__``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class _NameRegistry(dict):  # name -> entry, as Lightning's registries are dicts
    """Names and how to build each (a class and the keyword arguments it is called with)."""

    _kind: str  # the entry's key for the class; the name is under f"{_kind}_name"
    _entry_keys: tuple[str, ...]  # the entry's keys, in the order an entry lists them

    def __init__(self) -> None:
        super().__init__()
        self._builtin: set[str] = set()  # names fulmen registered and no user has replaced

    def _adder(
        self, name: str, cls: Callable[..., Any] | None, description: Any, init_params: dict[str, Any]
    ) -> Callable[..., Any]:
        """Store ``cls`` under ``name`` (returning it), or, without ``cls``, a decorator that does."""

        def add(cls: Callable[..., Any]) -> Callable[..., Any]:
            fields = {self._kind: cls, f"{self._kind}_name": name, "init_params": init_params,
                      "description": description}  # fmt: skip
            self[name] = {key: fields[key] for key in self._entry_keys}
            self._builtin.discard(name)
            return cls

        return add(cls) if cls is not None else add

    def _names_listed(self) -> str:
        """The names, as the ``KeyError`` for an unknown one lists them."""
        return ", ".join(sorted(self))

    def get(self, name: str, default: Any = None) -> Any:
        """A new object built from ``name``'s entry; ``default`` (when given) for an unknown name, else a
        ``KeyError`` listing the names."""
        if name in self:
            entry = self[name]
            return entry[self._kind](**entry["init_params"])
        if default is not None:
            return default
        raise KeyError(f"{name!r} not found in registry. Available names: {self._names_listed()}")

    def remove(self, name: str) -> None:
        self.pop(name)
        self._builtin.discard(name)

    def is_user_entry(self, name: str) -> bool:
        """Whether ``name`` was registered (or replaced) by a user rather than by fulmen."""
        return name in self and name not in self._builtin

    def _register_builtin(self, name: str, cls: Callable[..., Any], description: str, **params: Any) -> None:
        self.register(name, cls, description, **params)  # type: ignore[attr-defined]
        self._builtin.add(name)

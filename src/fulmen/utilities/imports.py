"""Optional packages and lazily loaded package contents, in one place.

``require`` fails early, naming the extra to install, when a component's package is missing.
``lazy_exports`` gives a package ``__getattr__`` / ``__dir__`` that import each public class from its
module on first use, so ``import fulmen`` (and a run that does not use a component) pays nothing for it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping


def require(package: str, extra: str, component: str) -> None:
    """Raise ``ModuleNotFoundError`` naming ``pip install 'fulmen[<extra>]'`` when ``package`` is missing."""
    if importlib.util.find_spec(package) is None:
        raise ModuleNotFoundError(
            f"{component} needs the `{package}` package, which is not installed: pip install 'fulmen[{extra}]' "
            f"(or pip install {package})."
        )


def lazy_exports(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose public names live in the modules ``where``
    maps them to (``{"ModelCheckpoint": "model_checkpoint", ...}``)."""

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    def __dir__() -> list[str]:
        return sorted([*importlib.import_module(package).__dict__, *where])

    return __getattr__, __dir__

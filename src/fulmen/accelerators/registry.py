"""``AcceleratorRegistry``: accelerator names ``Trainer(accelerator="...")`` accepts, and the names users add.

A team registers its accelerator once (``AcceleratorRegistry.register("my_chip", MyChipAccelerator)``) and every
script then picks it by name. The registry is a dict: name -> ``{"accelerator": class, "accelerator_name": name,
"init_params": {...}, "description": str}``, as Lightning's. The built-in names are listed (``cpu``, ``cuda``,
``mps``, ``tpu``, ``hpu``), but :func:`fulmen.accelerators.select_accelerator` resolves those itself (``"gpu"``,
``"auto"``, availability checks); a name a user registered, or a built-in name replaced with ``override=True``, is
built from its entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fulmen.accelerators.cpu import CPUAccelerator
from fulmen.accelerators.cuda import CUDAAccelerator
from fulmen.accelerators.hpu import HPUAccelerator
from fulmen.accelerators.mps import MPSAccelerator
from fulmen.accelerators.xla import XLAAccelerator
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.registry import _NameRegistry


class _AcceleratorRegistry(_NameRegistry):  # name -> entry, as Lightning's registry is a dict
    """Accelerator names and how to build each (a class and the keyword arguments it is called with)."""

    _kind = "accelerator"
    _entry_keys = ("description", "init_params", "accelerator", "accelerator_name")

    def register(
        self,
        name: str,
        accelerator: Callable[..., Any] | None = None,
        description: str = "",
        override: bool = False,
        **init_params: Any,
    ) -> Callable[..., Any]:
        """Register ``accelerator`` (a class, or any callable returning an accelerator) under ``name``, to be
        called with ``init_params``; without ``accelerator``, a decorator for the class. A name already
        registered raises ``MisconfigurationException`` unless ``override=True``."""
        if name in self and not override:
            raise MisconfigurationException(f"'{name}' is already present in the registry. HINT: Use `override=True`.")
        return self._adder(name, accelerator, description, init_params)

    def _names_listed(self) -> str:
        return str(sorted(self))

    def available_accelerators(self) -> set[str]:
        return set(self)

    def __str__(self) -> str:
        return f"Registered Accelerators: {', '.join(sorted(self))}"


AcceleratorRegistry = _AcceleratorRegistry()
for _name, _cls in (("cpu", CPUAccelerator), ("cuda", CUDAAccelerator), ("mps", MPSAccelerator),
                    ("tpu", XLAAccelerator), ("hpu", HPUAccelerator)):  # fmt: skip
    AcceleratorRegistry._register_builtin(_name, _cls, _cls.__name__)

__all__ = ["AcceleratorRegistry"]

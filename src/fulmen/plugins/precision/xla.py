"""``XLAPrecision``: precision on XLA (TPU) devices, which fulmen does not train on.

Without ``torch_xla`` it cannot be made, as in Lightning; with it, training refuses with what to use instead.
"""

from __future__ import annotations

from typing import NoReturn

import torch

from fulmen.plugins._unavailable import XLA_INSTEAD, refuse, require_package
from fulmen.precision import Precision
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import _XLA_AVAILABLE as _XLA_AVAILABLE
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.types import Optimizable as Optimizable

_SUPPORTED = ("32-true", "16-true", "bf16-true")


class XLAPrecision(Precision):
    """``precision``: ``'32-true'``, ``'16-true'`` or ``'bf16-true'``."""

    @property
    def compute_dtype(self) -> torch.dtype:
        """``dtype``: this precision's matrix products run in it."""
        return self.dtype

    def __init__(self, precision: str = "32-true") -> None:
        require_package("torch_xla", "torch_xla>=1.13", "XLAPrecision", XLA_INSTEAD, available=_XLA_AVAILABLE)
        if precision not in _SUPPORTED:
            raise ValueError(f"XLAPrecision(precision={precision!r}) is not supported. Use one of {list(_SUPPORTED)}.")
        self.name = precision
        self.dtype = {"16-true": torch.float16, "bf16-true": torch.bfloat16}.get(precision, torch.float32)

    def convert_module(self, module: torch.nn.Module) -> NoReturn:
        refuse(f"XLAPrecision({self.name!r}) (XLA / TPU devices)", XLA_INSTEAD)


__all__ = ["XLAPrecision"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "XLAPrecisionPlugin": "fulmen._graveyard.XLAPrecisionPlugin",
})  # fmt: skip

"""``BitsandbytesPrecision``: weights quantised by bitsandbytes (4-bit NF4 / FP4, 8-bit), which fulmen does not
run.

It takes Lightning's arguments and refuses them as Lightning does (without ``bitsandbytes`` it cannot be made;
the 8-bit modes compute in float16 only); with ``bitsandbytes`` installed, training refuses with what to use
instead.
"""

from __future__ import annotations

from typing import NoReturn

import torch

from fulmen.plugins._unavailable import refuse, require_package
from fulmen.precision import Precision
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases

_MODES = ("nf4", "nf4-dq", "fp4", "fp4-dq", "int8", "int8-training")
_INSTEAD = (
    "Load the quantised layers yourself in configure_model (e.g. bitsandbytes.nn.Linear4bit, or transformers' "
    "BitsAndBytesConfig) and train with Trainer(precision='bf16-mixed'), or use Lightning for this plugin."
)


class BitsandbytesPrecision(Precision):
    """``mode``: one of ``'nf4'``, ``'nf4-dq'``, ``'fp4'``, ``'fp4-dq'``, ``'int8'``, ``'int8-training'``;
    ``dtype``: the compute dtype; ``ignore_modules``: names (prefixes) of submodules whose Linear layers stay as
    they are."""

    @property
    def compute_dtype(self) -> torch.dtype:
        """``dtype``: the dequantized weights compute in it."""
        return self.dtype

    def __init__(
        self, mode: str, dtype: torch.dtype | None = None, ignore_modules: set[str] | None = None
    ) -> None:
        require_package("bitsandbytes", "bitsandbytes", "BitsandbytesPrecision", _INSTEAD)
        if dtype is None:
            bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
            dtype = torch.float16 if mode.startswith("int8") or not bf16 else torch.bfloat16
        if mode.startswith("int8") and dtype is not torch.float16:
            raise ValueError(
                f"BitsandbytesPrecision(mode={mode!r}, dtype={dtype}): the 8-bit modes compute in float16 only; "
                "pass dtype=torch.float16 (or leave it out)."
            )
        if mode not in _MODES:
            raise KeyError(f"BitsandbytesPrecision(mode={mode!r}) is not a mode; use one of {list(_MODES)}.")
        self.mode = mode
        self.dtype = dtype
        self.ignore_modules = ignore_modules or set()

    def convert_module(self, module: torch.nn.Module) -> NoReturn:
        refuse(f"BitsandbytesPrecision({self.mode!r}) (bitsandbytes quantisation)", _INSTEAD)


FabricBNBPrecision = BitsandbytesPrecision  # Lightning Fabric's class, the base of Lightning's: fulmen's is the one class

__all__ = ["BitsandbytesPrecision"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "BitsandbytesPrecisionPlugin": "fulmen._graveyard.BitsandbytesPrecisionPlugin",
})  # fmt: skip

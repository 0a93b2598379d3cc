"""``TransformerEnginePrecision``: NVIDIA TransformerEngine's FP8 layers, which fulmen does not run.

Without ``transformer_engine`` it cannot be made, as in Lightning; with it, training refuses with what to
use instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

import torch

from fulmen.plugins._unavailable import refuse, require_package
from fulmen.precision import Precision
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases

_INSTEAD = (
    "For 16-bit training use Trainer(precision='bf16-mixed') or '16-mixed'; for FP8, torchao's float8 "
    "conversion (torchao.float8.convert_to_float8_training) in configure_model."
)


class TransformerEnginePrecision(Precision):
    """``weights_dtype``: the dtype of the weights; ``recipe``: TransformerEngine's ``DelayedScaling`` (or its
    arguments as a mapping); ``replace_layers``: swap ``torch.nn`` layers for TransformerEngine's;
    ``fallback_compute_dtype``: the compute dtype of layers without FP8 (``weights_dtype`` by default)."""

    name = "transformer-engine"

    @property
    def compute_dtype(self) -> torch.dtype:
        """int8: FP8 layers count as 8-bit for the FLOPs table."""
        return torch.int8

    def __init__(
        self,
        *,
        weights_dtype: torch.dtype,
        recipe: Mapping[str, Any] | Any | None = None,
        replace_layers: bool | None = None,
        fallback_compute_dtype: torch.dtype | None = None,
    ) -> None:
        require_package("transformer_engine", "transformer_engine>=0.11.0", "TransformerEnginePrecision", _INSTEAD)
        self.weights_dtype = weights_dtype
        self.recipe = recipe
        self.replace_layers = replace_layers
        self.fallback_compute_dtype = fallback_compute_dtype or weights_dtype

    def convert_module(self, module: torch.nn.Module) -> NoReturn:
        refuse("TransformerEnginePrecision (TransformerEngine's FP8 layers)", _INSTEAD)


FabricTEPrecision = TransformerEnginePrecision  # Lightning Fabric's class, the base of Lightning's: fulmen's is the one class

__all__ = ["TransformerEnginePrecision"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "TransformerEnginePrecisionPlugin": "fulmen._graveyard.TransformerEnginePrecisionPlugin",
})  # fmt: skip

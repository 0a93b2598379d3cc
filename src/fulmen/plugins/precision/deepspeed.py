"""``DeepSpeedPrecision``: the precision of Lightning's DeepSpeed strategy, which fulmen does not run.

It is made with Lightning's argument (and refuses the precisions DeepSpeed has no mode for, as Lightning
does), so configurations naming it load; training with it refuses, naming what to use instead.
"""

from __future__ import annotations

from typing import NoReturn

import torch

from fulmen.plugins._unavailable import refuse
from fulmen.precision import Precision
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.enums import GradClipAlgorithmType as GradClipAlgorithmType
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import WarningCache as WarningCache
from fulmen.utilities.types import Steppable as Steppable

warning_cache = WarningCache()  # Lightning's module-level cache, for code that warns through it

_SUPPORTED = ("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed")
_INSTEAD = (
    "Training with DeepSpeed's engine needs `pip install deepspeed` and Lightning's DeepSpeedStrategy. In "
    "fulmen, shard the model with strategy='fsdp' (ZeRO-3's equivalent) or replicate it with strategy='ddp', "
    "and set the same precision with Trainer(precision=...)."
)


class DeepSpeedPrecision(Precision):
    """``precision``: ``'32-true'``, ``'16-true'``, ``'bf16-true'``, ``'16-mixed'`` or ``'bf16-mixed'``."""

    @property
    def compute_dtype(self) -> torch.dtype:
        """``dtype``: this precision's matrix products run in it."""
        return self.dtype

    def __init__(self, precision: str) -> None:
        if precision not in _SUPPORTED:
            raise ValueError(
                f"DeepSpeedPrecision(precision={precision!r}) is not supported. Use one of {list(_SUPPORTED)}."
            )
        self.name = precision
        self.dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16, "bf16-true": torch.bfloat16,
                      "16-true": torch.float16, "32-true": torch.float32}[precision]  # fmt: skip

    def convert_module(self, module: torch.nn.Module) -> NoReturn:
        refuse(f"DeepSpeedPrecision({self.name!r}) (DeepSpeed's engine)", _INSTEAD)


__all__ = ["DeepSpeedPrecision"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "DeepSpeedPrecisionPlugin": "fulmen._graveyard.DeepSpeedPrecisionPlugin",
})  # fmt: skip

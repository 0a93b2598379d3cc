"""The XLA launcher (``torch_xla``'s ``xmp.spawn``, one process per TPU core): constructed as Lightning's is,
refused when it would start processes, since fulmen trains on one XLA device only."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fulmen.accelerators.xla import require_xla
from fulmen.strategies.launchers.multiprocessing import _MultiProcessingLauncher
from fulmen.utilities.apply_func import move_data_to_device as move_data_to_device
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _XLA_AVAILABLE as _XLA_AVAILABLE
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_debug as rank_zero_debug

if TYPE_CHECKING:
    from fulmen.strategies.xla import XLAStrategy


class _XLALauncher(_MultiProcessingLauncher):
    """Would start one process per XLA device with ``torch_xla``; needs ``torch_xla`` to be constructed."""

    def __init__(self, strategy: XLAStrategy) -> None:
        require_xla("_XLALauncher", available=_XLA_AVAILABLE)
        super().__init__(strategy, start_method="fork")

    @property
    def is_interactive_compatible(self) -> bool:
        return True

    def launch(self, function: Callable[..., Any], *args: Any, trainer: Any = None, **kwargs: Any) -> Any:
        raise MisconfigurationException(
            "Training on several XLA devices starts one process per device with torch_xla's launcher, which fulmen "
            "does not drive. Train on one XLA device (Trainer(accelerator='tpu', devices=1)), or on GPUs with "
            "strategy='ddp' / 'fsdp'."
        )


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "TrainerFn": "fulmen.runtime.state.TrainerFn",
})  # fmt: skip

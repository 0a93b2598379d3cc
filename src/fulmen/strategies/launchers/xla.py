"""The XLA launcher (``torch_xla``'s ``xmp.spawn``, one process per TPU core): constructed as Lightning's is,
refused when it would start processes, since fulmen trains on one XLA device only."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fulmen.accelerators.xla import require_xla
from fulmen.strategies.launchers.multiprocessing import _MultiProcessingLauncher
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _XLA_AVAILABLE as _XLA_AVAILABLE

if TYPE_CHECKING:
    from fulmen.strategies.xla import XLAStrategy


class _XLALauncher(_MultiProcessingLauncher):
    """Would start one process per XLA device with ``torch_xla``; needs ``torch_xla`` to be constructed."""

    def __init__(self, strategy: XLAStrategy) -> None:
        require_xla("_XLALauncher")
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

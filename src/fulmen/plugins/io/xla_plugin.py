"""``XLACheckpointIO``: Lightning's checkpoint writer for XLA (TPU) tensors, which fulmen does not train on.

Without ``torch_xla`` it cannot be made, as in Lightning; with it, saving refuses with what to use instead.
"""

from __future__ import annotations

from typing import Any

from fulmen.plugins._unavailable import XLA_INSTEAD, refuse, require_package
from fulmen.plugins.io.torch_plugin import TorchCheckpointIO


class XLACheckpointIO(TorchCheckpointIO):
    """Saves XLA tensors in Lightning; accepted with Lightning's arguments, refused at use (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        require_package("torch_xla", "torch_xla>=1.13", "XLACheckpointIO", XLA_INSTEAD)
        super().__init__()

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        refuse("XLACheckpointIO (checkpoints of XLA tensors)", XLA_INSTEAD)


__all__ = ["XLACheckpointIO"]

"""``CheckpointIO``: the interface through which a strategy writes, reads and removes checkpoint files."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Any

from fulmen.plugins._interop import implements_foreign_base
from fulmen.utilities import cloud_io

_Path = str | os.PathLike[str]
_INTERFACE = ("save_checkpoint", "load_checkpoint", "remove_checkpoint", "teardown")


class CheckpointIO(ABC):
    """Save, load and remove checkpoint files. Implement all three (``teardown`` is called when a run
    ends).

    A ``CheckpointIO`` written for Lightning (a subclass of Lightning Fabric's ``CheckpointIO``, e.g. of its
    ``TorchCheckpointIO``) counts as one too: ``isinstance(obj, CheckpointIO)`` is true for it, so
    ``Trainer(plugins=[obj])`` and ``strategy(checkpoint_io=obj)`` take it as they take fulmen's.
    """

    @abstractmethod
    def save_checkpoint(self, checkpoint: dict[str, Any], path: _Path, storage_options: Any | None = None) -> None:
        """Write ``checkpoint`` to ``path``."""

    @abstractmethod
    def load_checkpoint(self, path: _Path, map_location: Any | None = None, weights_only: bool | None = None) -> dict[str, Any]:
        """Read the checkpoint at ``path``."""

    @abstractmethod
    def remove_checkpoint(self, path: _Path) -> None:
        """Delete the checkpoint at ``path`` (a missing file is not an error)."""

    def teardown(self) -> None:
        """The run ended: finish what is pending."""

    def link_checkpoint(self, target: _Path, link: _Path) -> None:
        """Make ``link`` name the checkpoint ``target`` (``ModelCheckpoint(save_last="link")``): an atomic
        symlink on a local disk, a copy on an object store. ``target`` was saved through this writer; one that
        saves in the background makes the link only once ``target`` is complete."""
        cloud_io.link(target, link)

    def raise_failed_save(self) -> None:
        """Raise the error of a save that failed since the last call, if one did (a save still running in the
        background, e.g. ``AsyncCheckpointIO``'s, is not waited for). A writer that saves before
        ``save_checkpoint`` returns has nothing to report here: the default does nothing. The training loop
        calls it at every step (``Strategy.raise_failed_checkpoint_save``), so it must cost next to nothing."""

    @classmethod
    def __subclasshook__(cls, subclass: type) -> bool:
        if cls is CheckpointIO and implements_foreign_base(subclass, "CheckpointIO", _INTERFACE):
            return True
        return NotImplemented


__all__ = ["CheckpointIO"]

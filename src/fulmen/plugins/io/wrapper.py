"""A ``CheckpointIO`` that hands every operation to another one (``AsyncCheckpointIO`` is one)."""

from __future__ import annotations

from typing import Any

from fulmen.checkpoint.files import link_through, raise_failed_save_of
from fulmen.plugins.io.checkpoint_plugin import CheckpointIO


class _WrappingCheckpointIO(CheckpointIO):
    """Delegates saving, loading and removing to ``checkpoint_io``.

    Without one, a ``TorchCheckpointIO`` is used, and a strategy may still put its own default in its place
    through the ``checkpoint_io`` setter; one given by the user is never replaced that way.
    """

    def __init__(self, checkpoint_io: CheckpointIO | None = None) -> None:
        super().__init__()
        if checkpoint_io is None:
            from fulmen.plugins.io.torch_plugin import TorchCheckpointIO

            self._checkpoint_io: CheckpointIO = TorchCheckpointIO()
            self._base_checkpoint_io_configured = False
        else:
            self._checkpoint_io = checkpoint_io
            # a wrapper around a wrapper: configured only if the innermost writer was chosen by the user
            self._base_checkpoint_io_configured = getattr(checkpoint_io, "_base_checkpoint_io_configured", True)

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """The writer every operation goes to."""
        return self._checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, checkpoint_io: CheckpointIO) -> None:
        if isinstance(checkpoint_io, _WrappingCheckpointIO):
            raise TypeError(
                f"{type(self).__name__}.checkpoint_io = {type(checkpoint_io).__name__}(...): the writer a wrapper "
                f"delegates to cannot itself be a wrapper; pass it at construction instead: "
                f"{type(self).__name__}({type(checkpoint_io).__name__}(...))."
            )
        if self._base_checkpoint_io_configured:
            return  # the user's choice stands
        inner = self._checkpoint_io
        if isinstance(inner, _WrappingCheckpointIO):
            inner.checkpoint_io = checkpoint_io
        else:
            self._checkpoint_io = checkpoint_io
        self._base_checkpoint_io_configured = True

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self.checkpoint_io.save_checkpoint(*args, **kwargs)

    def load_checkpoint(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.checkpoint_io.load_checkpoint(*args, **kwargs)

    def remove_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        self.checkpoint_io.remove_checkpoint(*args, **kwargs)

    def teardown(self) -> None:
        self.checkpoint_io.teardown()

    def link_checkpoint(self, target: Any, link: Any) -> None:
        link_through(self.checkpoint_io, target, link)

    def raise_failed_save(self) -> None:
        raise_failed_save_of(self.checkpoint_io)

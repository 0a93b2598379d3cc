"""What a strategy does with checkpoints: save, load, remove and link files through its ``CheckpointIO``, and
the states of the module and the optimizers a checkpoint holds (a mixin of ``Strategy``: sharded strategies
override these)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from torch.optim import Optimizer

from fulmen.checkpoint import sharded as distributed_checkpoint
from fulmen.checkpoint.files import link_through, raise_failed_save_of
from fulmen.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.plugins.io import CheckpointIO


class _CheckpointMixin:
    """``Strategy``'s checkpoint methods; ``Strategy.__init__`` sets the attributes below."""

    _checkpoint_io: CheckpointIO | None  # the one given (to the strategy or in Trainer(plugins=...))
    _default_checkpoint_io: CheckpointIO | None
    _lightning_module: LightningModule | None
    optimizers: list[Optimizer]

    if TYPE_CHECKING:  # Strategy's (the ranks of its processes)

        @property
        def is_global_zero(self) -> bool: ...

    @property
    def checkpoint_io(self) -> CheckpointIO:
        """How checkpoints are written, read and removed (``Trainer(plugins=[AsyncCheckpointIO()])``)."""
        if self._checkpoint_io is not None:
            return self._checkpoint_io
        if self._default_checkpoint_io is None:  # kept apart: reading the default is not choosing one
            from fulmen.plugins.io import TorchCheckpointIO  # fulmen.plugins loads on first use only

            self._default_checkpoint_io = TorchCheckpointIO()
        return self._default_checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, io: CheckpointIO) -> None:
        self._checkpoint_io = io

    def use_plugin_checkpoint_io(self, io: CheckpointIO) -> None:
        """The ``CheckpointIO`` of ``Trainer(plugins=[...])``; refused when the strategy was given its own, since
        one of the two would be silently ignored."""
        if self._checkpoint_io is not None and self._checkpoint_io is not io:
            raise MisconfigurationException(
                f"A CheckpointIO was given twice: to the strategy ({type(self._checkpoint_io).__name__}, "
                f"{type(self).__name__}(checkpoint_io=...)) and in Trainer(plugins=[{type(io).__name__}(...)]). "
                "Pass it in one place."
            )
        self._checkpoint_io = io

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        """Write on global rank zero only (every rank holds the same weights under DDP)."""
        if self.is_global_zero:
            self.checkpoint_io.save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    def raise_failed_checkpoint_save(self) -> None:
        """Raise the error of a checkpoint save that failed in the background (``AsyncCheckpointIO``) since the
        last call; nothing when none did. The training loop calls it once per batch, so a lost checkpoint
        stops the run at the next step instead of going unnoticed until the next save."""
        raise_failed_save_of(self.checkpoint_io)

    def failed_save_check(self) -> Callable[[], None] | None:
        """What :meth:`raise_failed_checkpoint_save` comes down to for the ``CheckpointIO`` in use now: its
        ``raise_failed_save``, or None for a writer that saves before returning (nothing ever to raise). The
        training loop reads it once per epoch and calls it after every batch, a few calls less per step."""
        from fulmen.plugins.io import CheckpointIO  # fulmen.plugins loads on first use only

        method: Callable[[], None] | None = getattr(self.checkpoint_io, "raise_failed_save", None)
        if method is None or getattr(method, "__func__", None) is CheckpointIO.raise_failed_save:
            return None
        return method

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """The checkpoint at ``checkpoint_path`` as a dict; a sharded (FSDP) checkpoint directory is read whole
        into this process, as ``fulmen consolidate`` would write it (resharding N processes -> 1)."""
        if distributed_checkpoint.is_sharded_checkpoint(checkpoint_path):
            return distributed_checkpoint.load_consolidated(checkpoint_path, weights_only=weights_only)
        return self.checkpoint_io.load_checkpoint(checkpoint_path, map_location="cpu", weights_only=weights_only)

    @property
    def restore_checkpoint_after_setup(self) -> bool:
        """Whether a checkpoint is loaded after :meth:`setup` (sharded models: the shards need the sharded
        model to land in) rather than before it."""
        return False

    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """What a checkpoint keeps of ``optimizer``."""
        return optimizer.state_dict()

    @property
    def lightning_restore_optimizer(self) -> bool:
        """Whether resuming restores the optimizers' states from the checkpoint (a strategy that restores them
        itself returns False; the schedulers are restored either way)."""
        return True

    def lightning_module_state_dict(self) -> dict[str, Any]:
        """The module's weights as a checkpoint's ``"state_dict"`` holds them."""
        module = self._lightning_module
        assert module is not None
        return module.state_dict()

    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        """Load the weights of ``checkpoint`` (a checkpoint dict: its ``"state_dict"``) into the module."""
        module = self._lightning_module
        assert module is not None
        module.load_state_dict(checkpoint["state_dict"], strict=strict)

    def load_optimizer_state_dict(self, checkpoint: Mapping[str, Any]) -> None:
        """Load the optimizers' states of ``checkpoint`` (its ``"optimizer_states"``, in the optimizers' order)."""
        self.load_optimizer_states(checkpoint["optimizer_states"], self.optimizers)

    def load_optimizer_states(self, states: list[Any], optimizers: list[Optimizer]) -> None:
        """Each optimizer's state from a checkpoint (the lists are of equal length, checked by the caller)."""
        for optimizer, state in zip(optimizers, states):
            optimizer.load_state_dict(state)

    def remove_checkpoint(self, filepath: Any) -> None:
        if self.is_global_zero:
            self.checkpoint_io.remove_checkpoint(filepath)

    def link_checkpoint(self, target: Any, link: Any) -> None:
        """Point ``link`` at the checkpoint ``target`` (``ModelCheckpoint(save_last="link")``), on global rank
        zero, which wrote ``target``. Through the ``CheckpointIO``, so that a writer saving in the background
        makes the link only once ``target`` is complete; one without the method (written for Lightning) saves
        before returning, and the link is made at once."""
        if self.is_global_zero:
            link_through(self.checkpoint_io, target, link)

    def state_dict(self) -> dict[str, Any]:
        """The module's weights (:meth:`lightning_module_state_dict`), ``{}`` before a module is connected."""
        return self.lightning_module_state_dict() if self._lightning_module is not None else {}

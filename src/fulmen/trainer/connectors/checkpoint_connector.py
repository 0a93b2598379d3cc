"""``lightning.pytorch.trainer.connectors.checkpoint_connector``: what a checkpoint holds and how a run is
restored from one is :mod:`fulmen.trainer.checkpointing` (the fit loop's part: :mod:`fulmen.loops.resume`)."""

from fulmen.trainer.checkpointing import (
    dump_checkpoint,
    resolve_ckpt_path,
    restore_module_and_callbacks,
    restore_training_state,
    save_checkpoint,
)
from fulmen.utilities.imports import _OMEGACONF_AVAILABLE as _OMEGACONF_AVAILABLE

__all__ = [
    "dump_checkpoint",
    "resolve_ckpt_path",
    "restore_module_and_callbacks",
    "restore_training_state",
    "save_checkpoint",
]

"""``lightning.pytorch.trainer.connectors.checkpoint_connector``: what a checkpoint holds and how a run is
restored from one is :mod:`fulmen.trainer.checkpointing` (the fit loop's part: :mod:`fulmen.loops.resume`)."""

from fulmen.precision import MixedPrecision as MixedPrecision
from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.trainer.checkpointing import (
    dump_checkpoint,
    resolve_ckpt_path,
    restore_module_and_callbacks,
    restore_training_state,
    save_checkpoint,
)
from fulmen.utilities.cloud_io import get_filesystem as get_filesystem
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import _OMEGACONF_AVAILABLE as _OMEGACONF_AVAILABLE
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.migration.utils import pl_legacy_patch as pl_legacy_patch
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn

__all__ = [
    "dump_checkpoint",
    "resolve_ckpt_path",
    "restore_module_and_callbacks",
    "restore_training_state",
    "save_checkpoint",
]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "ModelCheckpoint": "fulmen.callbacks.model_checkpoint.ModelCheckpoint",
    "SLURMEnvironment": "fulmen.plugins.environments.SLURMEnvironment",
    "find_model_local_ckpt_path": "fulmen.utilities.model_registry.find_model_local_ckpt_path",
})  # fmt: skip

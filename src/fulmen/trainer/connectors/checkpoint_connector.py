"""Lightning's import path ``lightning.pytorch.trainer.connectors.checkpoint_connector``: what a checkpoint
holds and how a run is restored from one is :mod:`fulmen.trainer.checkpointing` (the fit loop's part:
:mod:`fulmen.loops.resume`)."""

from fulmen.precision import MixedPrecision as MixedPrecision
from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.trainer.checkpointing import (
    CheckpointConnector,
    dump_checkpoint,
    resolve_ckpt_path,
    save_checkpoint,
)
from fulmen.utilities.cloud_io import get_filesystem as get_filesystem
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import _OMEGACONF_AVAILABLE as _OMEGACONF_AVAILABLE
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.migration.utils import pl_legacy_patch as pl_legacy_patch
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn

__all__ = ["CheckpointConnector", "dump_checkpoint", "resolve_ckpt_path", "save_checkpoint"]

# Lightning's name of the class (``trainer._checkpoint_connector``), which libraries import to type their hooks
_CheckpointConnector = CheckpointConnector


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "ModelCheckpoint": "fulmen.callbacks.model_checkpoint.ModelCheckpoint",
    "SLURMEnvironment": "fulmen.plugins.environments.SLURMEnvironment",
    "find_model_local_ckpt_path": "fulmen.utilities.model_registry.find_model_local_ckpt_path",
})  # fmt: skip

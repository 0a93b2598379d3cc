"""Checkpoint I/O plugins: how the strategy writes, reads and removes checkpoint files.

``Trainer(plugins=[AsyncCheckpointIO()])`` (or any ``CheckpointIO``, Lightning Fabric's included) replaces the
default ``TorchCheckpointIO``; every save (``ModelCheckpoint``, ``trainer.save_checkpoint``, the signal and
exception checkpoints), every load of ``ckpt_path`` and every top-k removal goes through it.
"""

from fulmen.plugins.io.async_plugin import AsyncCheckpointIO
from fulmen.plugins.io.checkpoint_plugin import CheckpointIO
from fulmen.plugins.io.torch_plugin import TorchCheckpointIO
from fulmen.plugins.io.xla_plugin import XLACheckpointIO

__all__ = ["AsyncCheckpointIO", "CheckpointIO", "TorchCheckpointIO", "XLACheckpointIO"]

from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})
# a class Lightning 2.x removed (it raises when made): see fulmen._graveyard
__getattr__ = _lazy_aliases(__name__, {"HPUCheckpointIO": "fulmen._graveyard.HPUCheckpointIO"}, fallback=__getattr__)

from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.core.optimizer import LightningOptimizer

__all__ = ["LightningDataModule", "LightningModule", "LightningOptimizer"]

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})

"""fulmen: a lean, fast training framework for PyTorch; drop-in for ``lightning.pytorch``'s public API.

``import fulmen as pl`` gives ``pl.Trainer``, ``pl.LightningModule``, ``pl.LightningDataModule``,
``pl.Callback`` and ``pl.seed_everything``; submodules mirror Lightning's (``fulmen.callbacks``,
``fulmen.loggers``, ``fulmen.strategies``, ``fulmen.utilities`` ...).
"""

from fulmen.callbacks.callback import Callback
from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.trainer.trainer import Trainer
from fulmen.utilities.seed import seed_everything

__version__ = "0.1.0"

_SUBMODULES = frozenset(
    {
        "accelerators",
        "callbacks",
        "cli",
        "core",
        "demos",
        "loggers",
        "loops",
        "plugins",
        "precision",
        "profilers",
        "runtime",
        "strategies",
        "trainer",
        "tuner",
        "utilities",
    }
)


def __getattr__(name: str) -> object:
    # ``import fulmen; fulmen.loggers.CSVLogger`` works as with Lightning, without importing every
    # submodule (and its optional dependencies) at ``import fulmen``.
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"fulmen.{name}")
    raise AttributeError(f"module 'fulmen' has no attribute {name!r}")


__all__ = ["Callback", "LightningDataModule", "LightningModule", "Trainer", "__version__", "seed_everything"]

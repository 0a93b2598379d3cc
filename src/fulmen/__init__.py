"""fulmen: a lean, fast training framework for PyTorch; drop-in for ``lightning.pytorch``'s public API.

``import fulmen as pl`` gives ``pl.Trainer``, ``pl.LightningModule``, ``pl.LightningDataModule``,
``pl.Callback`` and ``pl.seed_everything``; submodules mirror Lightning's (``fulmen.callbacks``,
``fulmen.loggers``, ``fulmen.strategies``, ``fulmen.utilities`` ...).
"""

import logging

from fulmen import _removed_paths
from fulmen.core.datamodule import LightningDataModule
from fulmen.core.hooks import Callback
from fulmen.core.module import LightningModule
from fulmen.trainer.trainer import Trainer
from fulmen.utilities.seed import seed_everything
from fulmen.utilities.warnings import disable_possible_user_warnings as disable_possible_user_warnings

__version__ = "0.1.0"

_removed_paths.install()  # Lightning's module paths of deprecated and removed classes (no file each)

# fulmen's messages (where checkpoints go, why training stopped, what a search found) reach the console at
# INFO level, as Lightning's do: through the application's logging when it configured some (and pytest's
# caplog), else through a handler of fulmen's own. `logging.getLogger("fulmen").setLevel(...)` quietens it.
_logger = logging.getLogger(__name__)
_logger.setLevel(logging.INFO)
if not logging.getLogger().hasHandlers():
    _logger.addHandler(logging.StreamHandler())
    _logger.propagate = False


def cli_lightning_logo() -> None:
    """Print fulmen's banner (examples call Lightning's ``cli_lightning_logo()`` first thing in ``main``)."""
    print(_LOGO)


_LOGO = r"""
   __       _
  / _|_   _| |_ __ ___   ___ _ __
 | |_| | | | | '_ ` _ \ / _ \ '_ \
 |  _| |_| | | | | | | |  __/ | | |
 |_|  \__,_|_|_| |_| |_|\___|_| |_|
"""


def install_as_lightning() -> None:
    """Make ``lightning.pytorch`` and ``pytorch_lightning`` (and their submodules) names of fulmen's modules; see
    :func:`fulmen.as_lightning.install_as_lightning`."""
    # imported here, not at ``import fulmen``: ``python -m fulmen.as_lightning`` must find that module unimported
    from fulmen.as_lightning import install_as_lightning as install

    install()


def __getattr__(name: str) -> object:
    # ``import fulmen; fulmen.loggers.CSVLogger`` works as with Lightning, without importing every
    # submodule (and its optional dependencies) at ``import fulmen``.
    import importlib.util

    if not name.startswith("_") and importlib.util.find_spec(f"fulmen.{name}") is not None:
        return importlib.import_module(f"fulmen.{name}")
    raise AttributeError(f"module 'fulmen' has no attribute {name!r}")


__all__ = [
    "Callback", "LightningDataModule", "LightningModule", "Trainer", "__version__", "cli_lightning_logo",
    "install_as_lightning", "seed_everything",
]  # fmt: skip

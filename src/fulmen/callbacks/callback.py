"""Lightning's import path ``lightning.pytorch.callbacks.callback``: the ``Callback`` base class is defined
with the other hook signatures, in :mod:`fulmen.core.hooks`, so that every layer can name it."""

from fulmen.core.hooks import Callback

__all__ = ["Callback"]

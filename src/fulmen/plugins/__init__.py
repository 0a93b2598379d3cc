"""Trainer plugins. Pass a precision object to set the precision with options the flag cannot carry, e.g.
``Trainer(plugins=[MixedPrecision("16-mixed", "cuda", scaler=torch.amp.GradScaler(init_scale=2.0**10))])``."""

from fulmen.plugins.precision import *  # noqa: F403 - the package re-exports its one module
from fulmen.plugins.precision import __all__ as __all__

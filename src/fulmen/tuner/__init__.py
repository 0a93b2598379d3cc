"""The tuner: the batch-size finder and the learning-rate finder (``Tuner(trainer)``, ``trainer.tune``)."""

from fulmen.tuner.tuning import Tuner

__all__ = ["Tuner"]

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})

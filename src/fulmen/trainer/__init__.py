from fulmen.trainer.trainer import Trainer
from fulmen.utilities.seed import seed_everything

__all__ = ["Trainer", "seed_everything"]

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})

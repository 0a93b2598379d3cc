"""Pieces that adapt torch's own classes: samplers that never repeat a sample across processes, and DDP's
gradient-reduction set-up for backward passes run outside its forward."""

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})

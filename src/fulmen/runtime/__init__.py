"""The runtime layer, below the loops: run state (progress, phase, stop requests), the hook dispatcher, the
result collection and metrics hub, data sources and RNG capture. Loops import it; it never imports the loops
or the trainer."""

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})

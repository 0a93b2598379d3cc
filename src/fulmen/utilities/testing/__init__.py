"""Helpers for test suites of fulmen programs (``RunIf``-style skip markers)."""

from fulmen.utilities.testing._runif import _runif_reasons

__all__ = ["_runif_reasons"]

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})

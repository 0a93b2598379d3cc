"""Helpers for test suites of fulmen programs (``RunIf``-style skip markers)."""

from fulmen.utilities.testing._runif import _runif_reasons

__all__ = ["_runif_reasons"]

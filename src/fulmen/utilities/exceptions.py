"""Exception types users catch by name (same names as Lightning's)."""

from __future__ import annotations


class MisconfigurationException(Exception):
    """A flag, hook return value or combination of settings that fulmen cannot run with."""


class _TunerExitException(Exception):
    """Internal: ends a trial run of the tuner early."""


class SIGTERMException(SystemExit):
    """Raised inside the loop when the process received SIGTERM."""

"""Exception types users catch by name (same names as Lightning's)."""

from __future__ import annotations


class MisconfigurationException(Exception):
    """A flag, hook return value or combination of settings that fulmen cannot run with."""


class InvalidValueError(MisconfigurationException, ValueError):
    """A flag whose value is outside what is allowed. Lightning raises ``ValueError`` for these, so user code
    that catches ``ValueError`` (or ``MisconfigurationException``) catches it."""


class InvalidTypeError(MisconfigurationException, TypeError):
    """A flag of the wrong type. Lightning raises ``TypeError`` for these; both classes catch it."""


class InvalidIndexError(MisconfigurationException, IndexError):
    """An index-like argument out of range (a negative epoch threshold ...): both classes catch it."""


class UnsupportedSetupError(MisconfigurationException, RuntimeError):
    """A combination the run cannot work with (several optimizers under automatic optimization without
    ``optimizer_idx`` ...). Lightning raises ``RuntimeError`` for these; both classes catch it."""


class ZeroIntervalError(InvalidValueError, ZeroDivisionError):
    """A schedule interval of 0 (``val_check_interval=0``, ``accumulate_grad_batches=0``). Lightning accepts the
    flag and fails with ``ZeroDivisionError`` at the first training batch; each of these classes catches it."""


class _TunerExitException(Exception):
    """Internal: ends a trial run of the tuner early."""


class SIGTERMException(SystemExit):
    """Raised inside the loop when the process received SIGTERM."""

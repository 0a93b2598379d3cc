"""Warning classes users filter by name (Lightning's names)."""

from __future__ import annotations

import warnings


class PossibleUserWarning(UserWarning):
    """A warning about something that is often a mistake but may be intended (few dataloader workers, no
    epoch limit set): filter this class to silence all of them at once."""


class LightningDeprecationWarning(DeprecationWarning):
    """An argument or name that still works but will go."""


def disable_possible_user_warnings(module: str = "") -> None:
    """Ignore every :class:`PossibleUserWarning` (raised from ``module``, a regex; all modules by default)."""
    warnings.filterwarnings("ignore", category=PossibleUserWarning, module=module)


__all__ = ["LightningDeprecationWarning", "PossibleUserWarning", "disable_possible_user_warnings"]

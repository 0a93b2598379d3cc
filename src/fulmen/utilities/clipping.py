"""Gradient clipping settings: one check for the Trainer flags and ``LightningModule.clip_gradients``."""

from __future__ import annotations

from typing import Any

from fulmen.utilities.enums import GradClipAlgorithmType
from fulmen.utilities.exceptions import InvalidTypeError, InvalidValueError

CLIP_ALGORITHMS = tuple(GradClipAlgorithmType.supported_types())


def check_clip_algorithm(algorithm: Any, flag: str = "gradient_clip_algorithm") -> GradClipAlgorithmType:
    """'norm' or 'value' (any case, or the enum member) as a :class:`GradClipAlgorithmType` member, which
    ``trainer.gradient_clip_algorithm`` shows (it still equals the plain string)."""
    if not isinstance(algorithm, str) or algorithm.lower() not in CLIP_ALGORITHMS:
        raise InvalidValueError(f"`{flag}` {algorithm} is invalid ({flag}={algorithm!r}). Use 'norm' or 'value'.")
    return GradClipAlgorithmType(algorithm.lower())


def check_clip_val(value: Any, flag: str = "gradient_clip_val") -> None:
    """A number >= 0, or None."""
    if value is None:
        return
    message = f"`{flag}` should be an int or a float >= 0, got {flag}={value!r} (0 or None disables clipping)."
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidTypeError(message)
    if value < 0:
        raise InvalidValueError(message)

"""``LightningEnum``: a string enum that compares with plain strings, ignoring case; and the enums of flags users
pass as strings (``GradClipAlgorithmType``)."""

from __future__ import annotations

import warnings
from enum import Enum
from typing import Literal

_Source = Literal["key", "value", "any"]


class LightningEnum(str, Enum):
    """``Stage.TRAIN == "train" == "TRAIN"``; ``Stage.from_str("Train")`` finds the member by its name."""

    @classmethod
    def from_str(cls, value: str, source: _Source = "key") -> LightningEnum:
        """The member whose name (``source="key"``), value (``"value"``) or either (``"any"``,
        names first) is ``value``, in any case; ``ValueError`` listing the choices otherwise."""
        if source in ("key", "any"):
            for name, member in cls.__members__.items():
                if name.lower() == value.lower():
                    return member
        if source in ("value", "any"):
            for member in cls.__members__.values():
                if member == value:
                    return member
        raise ValueError(f"{value!r} is not a {cls.__name__} {source}: expected one of {cls._choices(source)}.")

    @classmethod
    def try_from_str(cls, value: str, source: _Source = "key") -> LightningEnum | None:
        """As :meth:`from_str`, but a value that matches nothing warns and gives None."""
        try:
            return cls.from_str(value, source)
        except ValueError:
            warnings.warn(
                UserWarning(f"Invalid string: expected one of {cls._choices(source)}, but got {value}."),
                stacklevel=2,
            )
        return None

    @classmethod
    def _choices(cls, source: str) -> list[str]:
        """What ``source`` lets ``value`` match: the names, the values, or both."""
        names = list(cls.__members__)
        values = [member.value for member in cls.__members__.values()]
        return {"key": names, "value": values}.get(source, names + values)

    def __eq__(self, other: object) -> bool:
        other = other.value if isinstance(other, Enum) else other
        return self.value.lower() == str(other).lower()

    def __hash__(self) -> int:
        # equal members and strings must hash alike (``{Stage.TRAIN, "train"}`` has one element)
        return hash(self.value.lower())


class GradClipAlgorithmType(LightningEnum):
    """How ``gradient_clip_val`` clips: ``NORM`` scales all gradients together so that their total norm is at most
    the value (``torch.nn.utils.clip_grad_norm_``); ``VALUE`` clamps each gradient element to ``[-value, value]``
    (``torch.nn.utils.clip_grad_value_``)."""

    VALUE = "value"
    NORM = "norm"

    @staticmethod
    def supported_type(val: str) -> bool:
        """Whether ``val`` is one of the values, exactly (``'norm'``, ``'value'``)."""
        return any(member.value == val for member in GradClipAlgorithmType)

    @staticmethod
    def supported_types() -> list[str]:
        return [member.value for member in GradClipAlgorithmType]

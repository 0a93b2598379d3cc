"""``LightningEnum``: a string enum that compares with plain strings, ignoring case."""

from __future__ import annotations

from enum import Enum


class LightningEnum(str, Enum):
    """``Stage.TRAIN == "train" == "TRAIN"``; ``Stage.from_str("Train")`` finds the member."""

    @classmethod
    def from_str(cls, value: str, source: str = "key") -> LightningEnum:
        for member in cls:
            if value.lower() in (member.value.lower(), member.name.lower()):
                return member
        raise ValueError(f"{value!r} is not a {cls.__name__}: use one of {[m.value for m in cls]}.")

    def __eq__(self, other: object) -> bool:
        other = other.value if isinstance(other, Enum) else other
        return isinstance(other, str) and self.value.lower() == other.lower()

    def __hash__(self) -> int:
        return hash(self.value.lower())

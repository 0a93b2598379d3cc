"""The errors of plugins for hardware or packages fulmen does not run here (XLA / TPU, DeepSpeed,
TransformerEngine, bitsandbytes, MPI): each takes Lightning's arguments, and says what is missing and what to
use instead, at the point where Lightning itself fails (construction without the package) or, past that, when
it is used."""

from __future__ import annotations

from typing import NoReturn

from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import package_available


def require_package(package: str, requirement: str, what: str, instead: str, available: object = None) -> None:
    """``ModuleNotFoundError`` (Lightning's exception for a missing requirement) unless ``package`` imports.
    ``available``: the availability flag of the caller's module (``_XLA_AVAILABLE``), read by the caller when
    it runs, which then decides instead (a patched flag counts, as in Lightning)."""
    if not (package_available(package) if available is None else available):
        raise ModuleNotFoundError(
            f"{what} needs the package `{package}`, which is not installed: `pip install -U '{requirement}'`. "
            f"{instead}"
        )


def refuse(what: str, instead: str) -> NoReturn:
    """What fulmen raises when an object for hardware or a package it does not run is used."""
    raise MisconfigurationException(f"{what} is not supported by fulmen. {instead}")


XLA_INSTEAD = (
    "fulmen trains on CPUs and GPUs, not on XLA (TPU) devices: use accelerator='cpu' or 'gpu' with the default "
    "plugins, or Lightning itself on TPUs."
)

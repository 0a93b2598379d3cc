"""Run one small program under fulmen and under Lightning and keep what users see of it: the warnings (class
name and text) and the exception class. ``program(pl)`` gets the framework's namespace (``fulmen`` or
``lightning.pytorch``), so both runs execute the same user code.

    ours, theirs = both(program, r"logging interval")
    assert ours == theirs and ours.warnings  # the same warnings matching the pattern, in the same order
"""

from __future__ import annotations

import importlib
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from tests.parity import oracle


@dataclass
class Outcome:
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (category name, message), in order
    error: str | None = None  # the class name of what the program raised
    classes: list[str] = field(default_factory=list, compare=False)  # that class and its bases, by name


def framework(name: str) -> ModuleType:
    return importlib.import_module("fulmen") if name == "fulmen" else oracle.lightning()


def boring_model(pl: ModuleType) -> type:
    """The framework's ``BoringModel`` (a Linear(32, 2) on random 32-feature batches)."""
    return importlib.import_module(f"{pl.__name__}.demos.boring_classes").BoringModel


def run(name: str, program: Callable[[ModuleType], Any], pattern: str) -> Outcome:
    """``program`` under framework ``name``; the warnings whose text matches ``pattern`` (``re.search``)."""
    outcome = Outcome()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            program(framework(name))
        except Exception as err:
            outcome.error = type(err).__name__
            outcome.classes = [k.__name__ for k in type(err).__mro__]
    outcome.warnings = [(w.category.__name__, str(w.message)) for w in caught if re.search(pattern, str(w.message))]
    return outcome


def both(program: Callable[[ModuleType], Any], pattern: str) -> tuple[Outcome, Outcome]:
    """(fulmen's outcome, Lightning's outcome) of ``program``."""
    return run("fulmen", program, pattern), run("lightning", program, pattern)


def raised_as_lightning(ours: Outcome, theirs: Outcome) -> bool:
    """fulmen raised Lightning's exception class or a subclass of it (``except TheirClass`` catches ours)."""
    if theirs.error is None:
        return ours.error is None
    return theirs.error in ours.classes

"""Lightning 2.6.6, the test-only oracle the parity tests compare fulmen with.

It is part of the test extras (``pip install -e ".[test]"``), so a parity test without it fails with this
message instead of skipping: a suite that silently compares nothing would pass while proving nothing.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

parity = pytest.mark.parity  # every test that compares with Lightning carries it: ``pytest -m parity``


def lightning(module: str = "lightning.pytorch") -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as err:  # not a skip: see the module docstring
        raise RuntimeError(
            f"The parity tests need {module!r} (lightning==2.6.6, in the test extras): "
            'pip install -e ".[test]"'
        ) from err

"""``import fulmen`` stays cheap, and its submodules are reachable as attributes, as Lightning's are."""

from __future__ import annotations

import subprocess
import sys

import fulmen


def test_submodules_are_attributes_loaded_on_first_use():
    assert fulmen.loggers.CSVLogger.__name__ == "CSVLogger"
    assert fulmen.plugins.MixedPrecision is fulmen.precision.MixedPrecision
    assert not hasattr(fulmen, "no_such_module")
    code = "import sys, fulmen; print('fulmen.loggers.tensorboard' in sys.modules, 'fulmen.plugins' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]

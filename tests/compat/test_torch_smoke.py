"""tests/compat/torch_smoke.py, which CI runs on every other torch fulmen admits (.ci/torch_matrix), here on this
one: a two-process DDP and FSDP fit with background checkpoints, resumed (a background job of the suite: see
tests/prefetch.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests import prefetch

SCRIPT = Path(__file__).with_name("torch_smoke.py")


def _smoke(out: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), str(out)], capture_output=True, text=True, timeout=240,
                          cwd=out, env=environ)  # fmt: skip


prefetch.register("torch-smoke", __name__, _smoke)


@pytest.mark.slow
def test_the_torch_smoke_check_passes_on_this_torch():
    proc = prefetch.result("torch-smoke")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert f"torch smoke passed on torch {torch.__version__}" in proc.stdout

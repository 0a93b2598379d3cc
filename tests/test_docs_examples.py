"""The runnable examples of the user guide pages run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("page", ["checkpointing.md"])
def test_first_python_example_runs(page):
    source = (DOCS / page).read_text()
    code = re.search(r"```python\n(.*?)```", source, re.S)
    assert code is not None
    pytest.importorskip("safetensors")
    exec(compile(code.group(1), str(DOCS / page), "exec"), {"__name__": "__docs__"})
    assert Path("weights.safetensors").exists()

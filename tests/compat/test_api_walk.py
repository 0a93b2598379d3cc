"""Lightning 2.6.6's public API, walked name by name (tests/compat/api_walk.py): every module, name and
signature is fulmen's too, but for the deliberate differences allowlisted there and listed in
docs/compatibility.md. The three counts are printed at the end of the test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat import api_walk
from tests.parity import oracle

DOCS = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
COUNTS: list[str] = []  # read by tests/conftest.py's terminal summary


@pytest.fixture(scope="module")
def report() -> api_walk.Report:
    oracle.lightning()
    result = api_walk.walk()
    COUNTS.append(result.counts())
    return result


@oracle.parity
def test_every_public_name_of_lightning_is_fulmens_with_a_compatible_signature(report):
    assert report.problems() == [], report.counts()
    assert len(report.names) >= 322 and len(report.modules) >= 163  # the walk reached all of Lightning's API


@oracle.parity
def test_the_allowlist_is_documented_and_still_needed(report):
    documented = DOCS.read_text()
    differing = set(report.missing_names) | set(report.incompatible)
    for (module, name), why in api_walk.ALLOWED.items():
        assert f"`{name}`" in documented, f"{module}.{name} is allowlisted ({why}) but not in docs/compatibility.md"
        assert (module, name) in differing, f"{module}.{name} is allowlisted but no longer differs: remove it"


@pytest.mark.parametrize(
    ("theirs", "ours", "expected"),
    [
        ("def f(a, b=1): pass", "def f(a, b=1, c=2): pass", None),
        ("def f(a, b=1): pass", "def f(*args, **kwargs): pass", "positional order"),
        ("def f(a, b=1): pass", "def f(a, c, b=1): pass", "extra parameter 'c' has no default"),
        ("def f(a, b=1): pass", "def f(a, b=2): pass", "default 1 expected, got 2"),
        ("def f(a, b=1): pass", "def f(b=1, a=None): pass", "positional order"),
        ("def f(a, b): pass", "def f(a, b=None): pass", "default none (required) expected"),
        ("def f(a, **kw): pass", "def f(a): pass", "**kwargs expected"),
        ("def f(a, *, key=3): pass", "def f(a, **kw): pass", None),
        ("def f(a, b=1): pass", "def f(a, *, b=1): pass", "positional order"),
        ("def f(a, *, b=1): pass", "def f(a, b=1): pass", None),  # keyword-only there: either way here
    ],
)
def test_the_signature_rule(theirs, ours, expected):
    def compile_function(source: str) -> object:
        namespace: dict[str, object] = {}
        exec(source, namespace)
        return namespace["f"]

    found = api_walk.signature_difference(compile_function(theirs), compile_function(ours))
    assert (found is None) if expected is None else (found is not None and expected in found), found


@oracle.parity
def test_every_module_is_an_attribute_of_its_package_as_after_lightnings_imports(report):
    """``fulmen.callbacks.early_stopping`` without importing it first (a fresh interpreter: nothing imported)."""
    paths = [m[len(api_walk.LIGHTNING) + 1 :] for m in report.modules if m != api_walk.LIGHTNING]
    code = (
        "import functools, fulmen\n"
        f"for path in {paths!r}:\n"
        "    functools.reduce(getattr, path.split('.'), fulmen)\n"
        f"print('reached', {len(paths)})\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert f"reached {len(paths)}" in out.stdout


@oracle.parity
def test_availability_flags_are_where_lightnings_are_and_agree():
    """``from lightning.pytorch.<module> import _<PACKAGE>_AVAILABLE``: programs and test suites gate code on these
    flags; each exists in fulmen's counterpart module and reads the same here."""
    import importlib

    oracle.lightning()
    wrong = []
    for name, _ in api_walk.lightning_modules():
        try:
            theirs = importlib.import_module(name)
        except ImportError:  # a module of Lightning's that needs a package this machine lacks
            continue
        ours = importlib.import_module(api_walk.FULMEN + name[len(api_walk.LIGHTNING) :])
        for flag in (n for n in vars(theirs) if n.startswith("_") and n.endswith("_AVAILABLE")):
            if not hasattr(ours, flag):
                wrong.append(f"{ours.__name__}.{flag}: missing")
            elif bool(getattr(ours, flag)) != bool(getattr(theirs, flag)):
                wrong.append(f"{ours.__name__}.{flag}: {bool(getattr(ours, flag))}, Lightning's {bool(getattr(theirs, flag))}")
    assert wrong == []

"""The differential fuzzer's CI slice (tests/compat/fuzz.py): seeded random runs under fulmen and under
Lightning 2.6.6, compared hook by hook, warning by warning, number by number. A long run is done by hand
(``python tests/compat/fuzz.py --cases 3000``); docs/compatibility.md gives its latest count."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat import fuzz
from tests.parity import oracle

ROOT = Path(__file__).resolve().parents[2]


def _run_slice(first: int, count: int) -> None:
    """The cases in a process of their own: the once-per-process warnings of both frameworks then start fresh,
    whatever tests ran before (a divergence is reproduced with ``--case N``)."""
    oracle.lightning()
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "compat" / "fuzz.py"), "--cases", str(count), "--seed", str(first),
         "--strict"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert f"{count} cases, 0 diverging" in out.stdout


@oracle.parity
def test_random_runs_behave_as_under_lightning():
    _run_slice(0, 4)  # the fast tier's share; the slow tier runs the next 44


@pytest.mark.slow
@oracle.parity
def test_more_random_runs_behave_as_under_lightning():
    _run_slice(4, 44)


def test_the_comparison_sees_each_kind_of_difference():
    """The comparer itself: a difference in each aspect is reported (a fuzzer that compares nothing would pass)."""
    base = fuzz.Outcome(
        calls=[("on_fit_start", [], {})], warnings=["UserWarning: w"], counters={"global_step": 2},
        callback_metrics={"loss": 0.5}, lrs=[[0.1]], weights={"w": [1.0]}, files={"metrics.csv": [{"a": 1.0}]},
    )  # fmt: skip
    assert fuzz.compare(base, base) == []
    changes = {
        "hooks": {"calls": []},
        "warning missing": {"warnings": []},
        "counters": {"counters": {"global_step": 3}},
        "callback_metrics": {"callback_metrics": {"loss": 0.6}},
        "lrs": {"lrs": [[0.2]]},
        "weights": {"weights": {"w": [1.1]}},
        "file metrics.csv": {"files": {"metrics.csv": [{"a": 2.0}]}},
        "error": {"error": "ValueError: x", "error_classes": ["ValueError"]},
    }
    for aspect, change in changes.items():
        other = fuzz.Outcome(**{**vars(base), **change})
        found = fuzz.compare(base, other)
        assert any(line.startswith(aspect) for line in found), (aspect, found)
    theirs = fuzz.Outcome(error="MisconfigurationException: a", error_classes=["MisconfigurationException"])
    ours = fuzz.Outcome(error="InvalidValueError: b", error_classes=["InvalidValueError", "MisconfigurationException"])
    assert [line.split(":")[0] for line in fuzz.compare(theirs, ours)] == ["error text"]  # a subclass is fine


def test_cases_are_reproducible_from_their_seed():
    assert fuzz.generate(41) == fuzz.generate(41) and fuzz.generate(41) != fuzz.generate(42)


def test_a_case_over_its_time_limit_is_reported_not_waited_for(monkeypatch):
    """A hang (or a run far slower under one framework) is a finding of its own, and the long run goes on."""
    import time

    def slow_under_fulmen(case, framework):
        if framework == "fulmen":
            time.sleep(30)
        return fuzz.Outcome()

    monkeypatch.setattr(fuzz, "run_case", slow_under_fulmen)
    started = time.monotonic()
    assert fuzz.divergences(0, limit=0.2) == ["timeout: fulmen ran over 0.2 s"]
    assert time.monotonic() - started < 10


def test_a_case_over_the_limit_under_both_frameworks_is_not_a_divergence(monkeypatch):
    import time

    def endless(case, framework):
        time.sleep(30)

    monkeypatch.setattr(fuzz, "run_case", endless)
    monkeypatch.setattr(fuzz, "BOTH_OVER_LIMIT", [])
    assert fuzz.divergences(5, limit=0.1) == [] and fuzz.BOTH_OVER_LIMIT == [5]

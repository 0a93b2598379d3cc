"""The hang watchdog: a process whose progress count stops moving reports where it is and ends."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from fulmen.utilities.watchdog import HangWatchdog

PROGRAM = textwrap.dedent("""
    import itertools, time
    from fulmen.utilities.watchdog import HangWatchdog
    counter = itertools.count()
    moving = {moving}
    dog = HangWatchdog(0.6, (lambda: next(counter)) if moving else (lambda: 0), lambda: "in stage X", "rank 3 of 4", poll=0.1)
    dog.start()
    def stuck_here():
        time.sleep(2.5)
    stuck_here()
    dog.stop()
    print("finished")
""")


def _run(moving: bool) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", PROGRAM.format(moving=moving)], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    return done, time.monotonic() - start


@pytest.mark.slow
def test_no_progress_ends_the_process_with_a_report_and_its_stack():
    done, took = _run(moving=False)
    assert done.returncode == 1 and "finished" not in done.stdout
    assert "fulmen: rank 3 of 4 made no progress for 1 s (the limit is 0.6 s): in stage X." in done.stderr
    assert "in stuck_here" in done.stderr  # faulthandler's stack of the main thread
    assert took < 2.5 + 5


@pytest.mark.slow
def test_progress_keeps_the_process_alive():
    done, _ = _run(moving=True)
    assert done.returncode == 0 and "finished" in done.stdout and done.stderr == ""


def test_a_limit_must_be_positive():
    with pytest.raises(ValueError, match="timeout=0"):
        HangWatchdog(0, lambda: 0, lambda: "", "x")


def test_time_in_a_paused_block_does_not_count(monkeypatch):
    """The user's data preparation (``prepare_data`` on rank 0, the others waiting for it) may take any time."""
    import fulmen.utilities.watchdog as watchdog

    ended = []
    monkeypatch.setattr(watchdog.os, "_exit", ended.append)
    monkeypatch.setattr(HangWatchdog, "_report", lambda self, waited: None)
    dog = HangWatchdog(0.3, lambda: 0, lambda: "", "rank 1 of 2", poll=0.05)
    dog.start()
    try:
        with dog.paused():
            time.sleep(0.9)  # three limits without progress, paused
            assert ended == []
        deadline = time.monotonic() + 5
        while not ended and time.monotonic() < deadline:  # counted again once the block ends
            time.sleep(0.05)
        assert ended == [watchdog.EXIT_CODE]
    finally:
        dog.stop()

"""A rank that stops entering collectives ends the job within the hang limit, every process saying which rank
it is, where it was and its Python stack (instead of waiting out the 30-minute process-group timeout)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from fulmen.strategies.parallel import DEFAULT_HANG_TIMEOUT, hang_timeout_from_env
from fulmen.utilities.exceptions import MisconfigurationException

ROOT = Path(__file__).resolve().parents[2]


def _start(tmp_path: Path, hung: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", FULMEN_HANG_TIMEOUT="5",
               HANG_RANK=str(hung))  # fmt: skip
    out = tmp_path / f"hung{hung}"
    out.mkdir()
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / "strategies" / "hang_script.py"), str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=out,
                            start_new_session=True)  # fmt: skip


@pytest.mark.slow
def test_a_rank_that_stops_entering_collectives_ends_the_job_with_a_report(tmp_path):
    """Rank 0 hangs in one job, rank 1 in another; the two jobs run at the same time (most of each is the
    wait for the hang limit)."""
    start = time.monotonic()
    jobs = {hung: _start(tmp_path, hung) for hung in (0, 1)}
    outputs, took = {}, {}
    try:
        for hung, proc in jobs.items():
            outputs[hung], _ = proc.communicate(timeout=120)
            took[hung] = time.monotonic() - start
    finally:
        for proc in jobs.values():
            os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
    for hung, proc in jobs.items():
        output = outputs[hung]
        assert proc.returncode != 0, output[-3000:]
        print(f"the job whose rank {hung} hung ended {took[hung]:.1f} s after it started (hang limit 5 s)")
        assert took[hung] < 60, f"took {took[hung]:.0f} s"
        waiting = 1 - hung
        # the hung rank: its own stack shows where it stopped
        assert f"fulmen: rank {hung} of 2 (pid" in output and "made no progress for 5 s" in output, output[-4000:]
        assert 'hang_script.py", line 23 in training_step' in output, output[-4000:]  # the line that sleeps
        # the waiting rank, inside the step's backward (where DDP exchanges gradients), says so too: by its own
        # watchdog, or, when the hung rank's ended first and closed its connections, by the error that follows
        assert f"fulmen: rank {waiting} of 2" in output, output[-4000:]
        assert "in backward" in output, output[-4000:]


def test_the_hang_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("FULMEN_HANG_TIMEOUT", raising=False)
    assert hang_timeout_from_env() == DEFAULT_HANG_TIMEOUT == timedelta(minutes=10)
    monkeypatch.setenv("FULMEN_HANG_TIMEOUT", "90")
    assert hang_timeout_from_env() == timedelta(seconds=90)
    monkeypatch.setenv("FULMEN_HANG_TIMEOUT", "0")
    assert hang_timeout_from_env() is None
    monkeypatch.setenv("FULMEN_HANG_TIMEOUT", "soon")
    with pytest.raises(MisconfigurationException, match="FULMEN_HANG_TIMEOUT='soon'"):
        hang_timeout_from_env()

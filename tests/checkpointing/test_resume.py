"""Exact resume: a run SIGKILLed anywhere and resumed from its last checkpoint ends bitwise equal.

Each test drives ``resume_run.py`` in subprocesses (a real SIGKILL cannot be survived in-process).
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fulmen.checkpoint import files as checkpoint_io

SCRIPT = Path(__file__).with_name("resume_run.py")
BATCHES = 13  # per epoch, see resume_run.py
EPOCHS = 4


def _run(out: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(out), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=300,
    )


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)


def _assert_bitwise_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key}: max diff {(a[key] - b[key]).abs().max().item()}"


def _kill_points(seed: int, count: int) -> list[str]:
    """Strictly increasing random kill points of every kind (mid-epoch, mid-validation, epoch end, mid-save)."""
    rng = random.Random(seed)
    points: list[str] = []
    n = -1
    while len(points) < count:
        n += rng.randint(1, 3)
        kind = rng.choice(["start", "end", "end", "val", "epoch", "save"])
        if kind == "val":  # validation runs after batches 5 and 10 of each epoch (val_check_interval=5)
            while n % BATCHES not in (4, 9):
                n += 1
        if kind == "epoch":
            n = BATCHES * (n // BATCHES) + BATCHES - 1
            points.append(f"epoch:{n // BATCHES}")
        else:
            points.append(f"{kind}:{n}")
        assert n < BATCHES * EPOCHS - 1, "kill points must leave the run something to resume"
    return points


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    out = tmp_path_factory.mktemp("reference")
    result = _run(out, "--reference")
    assert result.returncode == 0, result.stderr
    return _weights(out / "final.pt")


@pytest.mark.slow
def test_resume_after_random_sigkills_is_bitwise_exact(tmp_path, reference):
    # one kill of each kind (end, epoch, start, val, save): every resume is a separate process, so a second
    # kill of a kind already seen would cost a launch and check nothing new. Two runs at the same time (one core
    # each), each killed in turn at its share of the points, each then resumed to the end
    points = _kill_points(seed=20261125, count=5)
    assert {p.split(":")[0] for p in points} == {"start", "end", "val", "epoch", "save"}, points
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(_killed_and_resumed, tmp_path / "run-a", points[:3], outside=False),
                pool.submit(_killed_and_resumed, tmp_path / "run-b", points[3:], outside=True)]  # fmt: skip
        for run in runs:
            _assert_bitwise_equal(run.result(), reference)


def _killed_and_resumed(out: Path, points: list[str], outside: bool) -> dict:
    """A run killed at each of ``points`` in turn (each launch resuming the last), then, with ``outside``, once
    more from outside at a moment the run does not choose (possibly mid-save); its weights once resumed to the end."""
    for point in points:
        result = _run(out, "--resume", "--kill", point)
        assert result.returncode == -signal.SIGKILL, (point, result.returncode, result.stderr[-2000:])
        assert not (out / "final.pt").exists()
    if outside:
        target = random.Random(7).randint(1, 4)
        proc = subprocess.Popen([sys.executable, str(SCRIPT), str(out), "--resume"], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        seen = 0
        for line in proc.stdout:
            if line.startswith("batch"):
                seen += 1
                if seen == target:
                    proc.kill()
                    break
        proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL
    final = _run(out, "--resume")
    assert final.returncode == 0, final.stderr[-2000:]
    return _weights(out / "final.pt")


@pytest.mark.slow
def test_resume_with_persistent_worker_processes(tmp_path):
    """With random augmentation drawn in the workers' ``__getitem__`` (sample seeding makes it exact)."""
    env = {"PERSIST": "1", "AUGMENT": "1"}
    ref_out = tmp_path / "ref"
    out = tmp_path / "run"
    # the reference and the run that is killed are independent: they run at the same time
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        reference_run = pool.submit(_run, ref_out, "--reference", "--workers", "2", env=env)
        # killed mid-validation in epoch 1, inside an accumulation window: the workers of both loaders are running
        killed_run = pool.submit(_run, out, "--workers", "2", "--kill", "val:22", env=env)
        assert reference_run.result().returncode == 0
        assert killed_run.result().returncode == -signal.SIGKILL
    assert _run(out, "--resume", "--workers", "2", env=env).returncode == 0
    _assert_bitwise_equal(_weights(out / "final.pt"), _weights(ref_out / "final.pt"))


@pytest.mark.slow
def test_kill_during_save_leaves_previous_checkpoint(tmp_path, reference):
    out = tmp_path / "run"
    result = _run(out, "--kill", "save:20")
    assert result.returncode == -signal.SIGKILL
    ckpt_dir = out / "checkpoints"
    leftovers = [p.name for p in ckpt_dir.iterdir() if p.name.endswith(".tmp")]
    assert leftovers, "the kill should have hit a half-written temporary file"
    # the file under the final name is the complete previous checkpoint (end of batch 19)
    checkpoint = checkpoint_io.load(ckpt_dir / "last.ckpt")
    progress = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    assert checkpoint["epoch"] == 1 and progress["current"]["processed"] == 20 - BATCHES
    resumed = _run(out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert not [p for p in ckpt_dir.iterdir() if p.name.endswith(".tmp")], "stale temporaries are cleaned up"
    _assert_bitwise_equal(_weights(out / "final.pt"), reference)


@pytest.mark.slow
def test_sigterm_during_validation_saves_without_finishing_it(tmp_path, reference):
    """A preemption notice during a (long) validation: the run saves after the validation batch in flight, as of
    the training batch's end with its validation still to run; the resumed run validates again and ends
    bitwise equal."""
    out = tmp_path / "run"
    result = _run(out, "--kill", "valterm:22")  # batch 22: inside an accumulation window, in epoch 1
    # status 0 (a requeued job resumes), no traceback
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "interrupted" not in result.stdout.splitlines()  # fit does not return: the script does not go on
    validations = [line for line in result.stdout.splitlines() if line.startswith("validation 22")]
    assert validations == ["validation 22 0", "validation 22 1"], "batches 2 and 3 of 4 are not run"
    resumed = _run(out, "--resume", "--kill", "valterm:-1")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    # the resumed run validates batch 22's run again, from its first batch
    assert [line for line in resumed.stdout.splitlines() if line.startswith("validation")][:4] == [
        f"validation 22 {i}" for i in range(4)
    ]
    _assert_bitwise_equal(_weights(out / "final.pt"), reference)


@pytest.mark.slow
def test_ctrl_c_saves_at_the_end_of_the_optimizer_step_and_stops_cleanly(tmp_path, reference):
    """The signal path SIGTERM shares (SIGTERM itself: the test above, status 0)."""
    out = tmp_path / "run"
    result = _run(out, "--kill", "int:6")
    # Ctrl-C: status 1, as with Lightning, after the checkpoint
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("batch")]
    # the signal comes as batch 6 opens an accumulation window of 3: the optimizer step in flight (batches
    # 6-8) finishes, then the run saves and stops
    assert lines[-1] == "batch 8", lines[-3:]
    assert "interrupted" not in result.stdout.splitlines()  # fit does not return: the script does not go on
    assert (out / "checkpoints" / "last.ckpt").exists()
    resumed = _run(out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    _assert_bitwise_equal(_weights(out / "final.pt"), reference)

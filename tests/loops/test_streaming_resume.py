"""Real streaming data (Hugging Face ``datasets``, litdata), SIGKILLed mid-epoch and resumed from ``last.ckpt``,
and resumed from a checkpoint written at an epoch end: the final weights are the uninterrupted run's, every
step trains the samples it trained there, and no sample is read twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from tests.loops.streaming_resume import fit, write_parquet

SCRIPT = Path(__file__).with_name("streaming_resume.py")
ROOT = Path(__file__).resolve().parents[2]
STEPS = 16  # per epoch: 64 samples, batches of 4


def _run(out: Path, source: str, run: str, ckpt: Path | None = None) -> None:
    fit(out, source, run, ckpt=str(ckpt) if ckpt else None)


def _run_killed(out: Path, source: str, run: str, step: int) -> None:
    """In a process of its own: SIGKILLed after ``step`` optimizer steps."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), source, run, "--kill", str(step)],
                          capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, (proc.stdout + proc.stderr)[-3000:]


def _trained(out: Path, run: str) -> list[list[int]]:
    return [[int(i) for i in line.split()] for line in (out / f"trained-{run}").read_text().splitlines()]


def _reads(out: Path, run: str) -> Counter[int]:
    return Counter(int(i) for f in (out / f"reads-{run}").iterdir() for i in f.read_text().split())


def _weights(out: Path, run: str) -> dict[str, torch.Tensor]:
    return torch.load(out / f"weights-{run}.pt", weights_only=True)


def _prepare(out: Path, source: str) -> None:
    if source.startswith("hf"):  # pyarrow, in this process like the runs that read the files (a start saved)
        write_parquet(out)
        return
    code = f"from pathlib import Path; from tests.loops.streaming_resume import write_litdata as w; w(Path({str(out)!r}))"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)  # optimize() sets spawn: not here


SOURCES = [
    pytest.param("hf", marks=pytest.mark.skipif(not __import__("importlib").util.find_spec("datasets"), reason="needs datasets")),
    pytest.param("hf-stateful", marks=pytest.mark.skipif(not __import__("importlib").util.find_spec("torchdata"), reason="needs torchdata")),
    pytest.param("litdata", marks=pytest.mark.skipif(not __import__("importlib").util.find_spec("litdata"), reason="needs litdata")),
]  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("source", SOURCES)
def test_a_killed_streaming_run_resumes_without_reading_again(tmp_path, source):
    _prepare(tmp_path, source)
    _run(tmp_path, source, "whole")
    reference = _trained(tmp_path, "whole")
    assert len(reference) == 2 * STEPS

    kill = STEPS // 2 + 3  # inside the first epoch
    _run_killed(tmp_path, source, "killed", kill)
    last = tmp_path / "ckpt-killed" / "last.ckpt"
    written_at = torch.load(last, weights_only=True)["global_step"]
    _run(tmp_path, source, "resumed", last)
    trained = _trained(tmp_path, "killed")[:written_at] + _trained(tmp_path, "resumed")
    assert trained == reference
    for key, value in _weights(tmp_path, "whole").items():
        assert torch.equal(value, _weights(tmp_path, "resumed")[key]), key
    # the resumed run reads the first epoch's rest (from the batch after the checkpoint) and the second epoch
    # whole: the samples trained before the checkpoint once, the others twice
    reads = _reads(tmp_path, "resumed")
    before = {i for batch in reference[:written_at] for i in batch}
    assert all(reads[i] == (1 if i in before else 2) for i in range(64)), reads

    # and from the checkpoint written at the end of the first epoch: the second epoch whole, nothing before it
    at_epoch_end = tmp_path / "epochs-whole" / f"epoch=0-step={STEPS}.ckpt"
    _run(tmp_path, source, "from-epoch-end", at_epoch_end)
    assert _trained(tmp_path, "from-epoch-end") == reference[STEPS:]
    reads = _reads(tmp_path, "from-epoch-end")
    if source == "hf-stateful":
        # torchdata's loader restored at an epoch end lets its workers prefetch once more before it sees the
        # epoch is over (read, never trained): at most 2 workers x prefetch_factor 2 x 4 samples
        assert set(reads.values()) <= {1, 2} and sum(reads.values()) <= 64 + 16
    else:
        assert set(reads.values()) == {1}
    for key, value in _weights(tmp_path, "whole").items():
        assert torch.equal(value, _weights(tmp_path, "from-epoch-end")[key]), key

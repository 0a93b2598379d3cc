"""is_shared_filesystem: one process and remote paths are shared; across two real processes (torchrun, gloo)
the answer comes from the strategy's collectives and equals Lightning Fabric's on the same strategy."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import fulmen
from fulmen.utilities import is_shared_filesystem
from tests.parity import oracle

ROOT = Path(__file__).resolve().parents[2]


@oracle.parity
def test_one_process_and_remote_paths_are_shared(tmp_path):
    oracle.lightning()
    from lightning.fabric.utilities.distributed import is_shared_filesystem as theirs

    strategy = fulmen.Trainer(accelerator="cpu", devices=1, logger=False).strategy
    for path in (None, tmp_path, "s3://bucket/folder", "memory://x", tmp_path / "missing"):
        assert is_shared_filesystem(strategy, path) is True
        assert theirs(strategy, path) is True
    assert not list(tmp_path.iterdir())  # nothing written by a one-process check


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@oracle.parity
@pytest.mark.slow
def test_two_processes_decide_together_as_lightning(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    command = [sys.executable, "-m", "torch.distributed.run", "--master_addr=127.0.0.1",
               f"--master_port={_free_port()}", "--nproc_per_node=2",
               str(ROOT / "tests" / "utilities" / "shared_fs_script.py"), str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    for result in results:
        for name in ("cwd", "shared", "file", "per_rank", "remote"):
            ours, theirs = result[name]
            assert ours == theirs, (name, result)
        assert result["cwd"][0] and result["shared"][0] and result["file"][0] and result["remote"][0]
        assert result["per_rank"][0] is False  # the same name resolves to different folders
        assert "The path does not exist" in result["missing"]
        assert not result["leftover_marker"]

"""The runnable examples of the user guide pages run as written."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests import prefetch

DOCS = Path(__file__).resolve().parents[1] / "docs"


def _run_first_example(page: str, after: str = "") -> None:
    """Run the page's first Python block (the first after the heading ``after``, when given)."""
    source = (DOCS / page).read_text()
    if after:
        source = source[source.index(after):]
    code = re.search(r"```python\n(.*?)```", source, re.S)
    assert code is not None
    exec(compile(code.group(1), str(DOCS / page), "exec"), {"__name__": "__docs__"})


def test_callbacks_example_runs(capsys):
    _run_first_example("callbacks.md", after="## More callbacks")
    out = capsys.readouterr().out
    assert "epoch 0 groups 1" in out and "epoch 2 groups 2" in out  # the backbone joined at epoch 1
    assert "predictions/predictions.pt" in out and Path("predictions/predictions.pt").exists()


@pytest.mark.slow
def test_loggers_example_runs(capsys, monkeypatch):
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    _run_first_example("logging.md", after="## Experiment trackers")
    out = capsys.readouterr().out
    assert "mlflow steps: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" in out
    assert "mlflow artifacts: ['epoch=1-step=10']" in out
    assert list(Path("logs/wandb").glob("offline-run-*/run-*.wandb"))


def test_profilers_example_runs(capsys):
    _run_first_example("profilers.md")
    assert "slowest action:" in capsys.readouterr().out
    assert Path("profile/fit-perf.txt").read_text().startswith("FIT Profiler Report")


def test_storage_example_runs(capsys):
    import fsspec

    try:
        _run_first_example("storage.md")
        out = capsys.readouterr().out
        assert "checkpoints" in out and "metrics.csv" in out
        assert not Path("memory:").exists()
    finally:
        fsspec.filesystem("memory").store.clear()


def test_checkpointing_example_runs():
    pytest.importorskip("safetensors")
    _run_first_example("checkpointing.md")
    assert Path("weights.safetensors").exists()


def test_optimization_example_runs(capsys):
    _run_first_example("optimization.md")
    out = capsys.readouterr().out
    assert "manual: 32" in out
    # epoch 0: two windows of 4 batches, each ending with a step of both optimizers (global step 4);
    # epoch 1: factor 1 from step 4 on, 8 batches x 2 optimizers
    assert "1.x automatic: 20" in out


def test_performance_example_runs(capsys):
    _run_first_example("performance.md")
    out = capsys.readouterr().out
    final = float(out.rsplit("final loss", 1)[1].split()[0])
    assert final < 0.05  # x**2 on [0, 1) is learned within the five epochs


def _distributed_example(folder: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """docs/distributed.md's train.py as a user runs it: `python train.py`, two processes by fulmen's launcher."""
    source = (DOCS / "distributed.md").read_text()
    code = re.search(r"```python\n(.*?)```", source, re.S)
    assert code is not None
    (folder / "train.py").write_text(code.group(1))
    env = {k: v for k, v in environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "train.py"], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


def _distributed_fsdp_example(folder: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """docs/distributed.md's FSDP script, as a user runs it: torchrun, two processes."""
    source = (DOCS / "distributed.md").read_text()
    source = source[source.index("## Sharded training (FSDP)") :]
    code = re.search(r"```python\n(.*?)```", source, re.S)
    assert code is not None
    script = folder / "fsdp_train.py"
    script.write_text(code.group(1))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={port}",
                           str(script), str(folder / "run")], capture_output=True, text=True, env=env, cwd=folder,
                          timeout=300)  # fmt: skip


# both launch processes and wait: started in the background when these tests are selected (tests/prefetch.py)
prefetch.register("docs-distributed", __name__, _distributed_example)
prefetch.register("docs-distributed-fsdp", __name__, lambda folder, environ: (folder, _distributed_fsdp_example(folder, environ)))


@pytest.mark.slow
def test_distributed_example_runs():
    done = prefetch.result("docs-distributed")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "rank 0 of 2: loss" in done.stdout and "rank 1" not in done.stdout  # trainer.print: rank 0 only


@pytest.mark.slow
def test_tuning_example_runs(capsys):
    _run_first_example("tuning.md")
    out = capsys.readouterr().out
    size = int(out.split("batch size ")[1].split(",")[0])
    assert size == 121  # no out-of-memory on the CPU: capped at max_val 128, less binsearch's 5% margin
    assert "learning rate" in out


def test_cli_example_runs(capsys):
    import runpy

    pytest.importorskip("jsonargparse")
    # from a file, as a user runs it: the parser reads the model's signature from its source
    source = (DOCS / "cli.md").read_text()
    code = re.search(r"```python\n(.*?)```", source[source.index("## Optimizers and schedulers"):], re.S)
    assert code is not None
    Path("example.py").write_text(code.group(1))
    runpy.run_path("example.py")
    out = capsys.readouterr().out
    assert "recorded: torch.optim.SGD" in out and "rebuilt: SGD" in out


@pytest.mark.slow
def test_distributed_strategy_registry_example_runs():
    """docs/distributed.md's StrategyRegistry snippet: the registered name builds the configured strategy."""
    from fulmen.strategies import StrategyRegistry

    source = (DOCS / "distributed.md").read_text()
    source = source[source.index("## Options") :]
    code = re.search(r"```python\n(.*?)```", source, re.S)
    assert code is not None
    scope: dict = {}
    try:
        exec(compile(code.group(1), "distributed.md", "exec"), scope)
    finally:
        StrategyRegistry.remove("ddp_big_buckets")
    assert scope["trainer"].strategy._ddp_kwargs["bucket_cap_mb"] == 100 and scope["trainer"].world_size == 2


@pytest.mark.slow
def test_distributed_fsdp_example_runs_under_torchrun(tmp_path):
    """docs/distributed.md's FSDP script under torchrun (two processes), then its checkpoint consolidated."""
    folder, run = prefetch.result("docs-distributed-fsdp")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "world 2: loss" in run.stdout and "last.ckpt" in run.stdout
    last = folder / "run" / "checkpoints" / "last.ckpt"
    from fulmen.cli import main

    main(["consolidate", str(last), str(tmp_path / "model.ckpt")])
    checkpoint = torch.load(tmp_path / "model.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 16 and "blocks.3.mlp.2.weight" in checkpoint["state_dict"]


@pytest.mark.slow
def test_as_lightning_example_runs(tmp_path):
    """In a fresh interpreter: the alias changes a process's imports for good."""
    import subprocess
    import sys

    code = re.search(r"```python\n(.*?)```", (DOCS / "as_lightning.md").read_text(), re.S)
    assert code is not None
    (tmp_path / "example.py").write_text(code.group(1))
    out = subprocess.run([sys.executable, str(tmp_path / "example.py")], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "epoch 0: loss" in out.stdout and "epoch 1: loss" in out.stdout
    assert out.stdout.rstrip().endswith("fulmen.trainer.trainer 2.6.6 True")


def test_saving_in_the_background_example_runs(capsys):
    _run_first_example("checkpointing.md", after="## Saving in the background")
    import torch

    assert "32 ['layer.bias', 'layer.weight']" in capsys.readouterr().out.splitlines()
    assert torch.load("background/last.ckpt", weights_only=True)["global_step"] == 48  # written by the resumed run
    assert not [p for p in Path("background").iterdir() if p.name.endswith(".tmp")]


@pytest.mark.slow
def test_resuming_data_pipelines_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _run_first_example("checkpointing.md", after="## Resuming data pipelines")
    assert (tmp_path / "stream" / "epoch=0-step=3.ckpt").exists()


@pytest.mark.slow
def test_fault_tolerance_example_saves_mid_validation_under_torchrun_and_resumes(tmp_path):
    """The elastic example under torchrun: SIGTERM to torchrun during a slow validation saves within a
    validation batch (not after the whole validation), and the same command then finishes the run."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    source = (DOCS / "fault-tolerance.md").read_text()
    code = re.search(r"```python\n(.*?)```", source, re.S)
    assert code is not None
    (tmp_path / "train.py").write_text(code.group(1))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_", "PL_"))}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update(PYTHONPATH=str(DOCS.parent / "src"), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1:2", "--nproc-per-node=2",
               "--max-restarts=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
               "--rdzv-conf=last_call_timeout=1", "--monitor-interval=0.5", "train.py"]  # fmt: skip
    job = subprocess.Popen(command, cwd=tmp_path, env={**env, "SLOW_VALIDATION": "0.5"}, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)  # fmt: skip
    lines = []
    try:
        assert job.stdout is not None
        for line in job.stdout:  # the first validation inside the epoch (16 batches of 0.5 s per process)
            lines.append(line)
            if line.startswith("validating after step 8"):
                break
        time.sleep(1.0)
        job.send_signal(signal.SIGTERM)
        start = time.monotonic()
        lines += job.stdout.readlines()
        job.wait(timeout=60)
        took = time.monotonic() - start
    finally:
        if job.poll() is None:
            job.kill()
    output = "".join(lines)
    assert "Saved checkpoint" in output, output[-3000:]
    print(f"saved and exited {took:.2f} s after SIGTERM")
    assert took < 6, f"the save came {took:.1f} s after the signal (the whole validation takes 8 s)"
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 8
    resumed = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "validating after step 8" in resumed.stdout  # the interrupted validation runs again
    assert "finished at step 32" in resumed.stdout

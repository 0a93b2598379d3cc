"""Elastic training under torchrun: two agents on 127.0.0.1 stand for two machines of 2 processes each.

A node SIGKILLed at a random step: torchrun restarts the job on the node that remains, ``fit(ckpt_path="last")``
continues from the newest complete checkpoint on 2 processes, ``GlobalBatchSize`` doubles the accumulation, and
the run ends with the weights of one that never lost a node, every optimizer step having trained the same 16
samples. A node that joins (scale up) makes torchrun restart the job on both: the running processes save at the
end of their optimizer step (SIGTERM) and the job continues on 4.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

import fulmen
from fulmen.loops.resume import global_order
from tests.strategies.elastic_script import EPOCHS, GLOBAL_BATCH
from tests.strategies.fsdp_model import Indexed, Wide

ROOT = Path(__file__).resolve().parents[2]
STEPS_PER_EPOCH = len(Indexed()) // GLOBAL_BATCH
_RECORD = re.compile(r"samples-w(\d+)-s(\d+)-p(\d+)-r(\d+)\.txt")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _agent(out: Path, port: int, host: bool, name: str, pace: float = 0.25) -> subprocess.Popen:
    """A torchrun agent of a job that may run on 1 or 2 nodes; its own session, so that killing the group is
    losing the whole machine (agent and workers)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_", "PL_"))}
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", PACE=str(pace),
               FULMEN_HANG_TIMEOUT="30",
               # torch 2.13's agents, sharing the rendezvous store with the workers (the default), never start
               # the workers of a round that a node joined (scale up); a store of their own per round does
               TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")  # fmt: skip
    # short rendezvous timings: a lost node is noticed after 4 missed 1 s heartbeats, and a round waits 3 s
    # for more nodes once it has the minimum
    conf = f"is_host={int(host)},last_call_timeout=3,keep_alive_interval=1,keep_alive_max_attempt=4,join_timeout=120"
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1:2", "--nproc-per-node=2",
               "--max-restarts=3", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=elastic",
               f"--rdzv-conf={conf}", "--monitor-interval=0.5",
               str(ROOT / "tests" / "strategies" / "elastic_script.py"), str(out)]  # fmt: skip
    log = open(out / f"agent-{name}.log", "w")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=out, start_new_session=True)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (torchrun starts its workers in sessions of their own)."""
    parents: dict[int, list[int]] = defaultdict(list)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        parents[int(fields[1])].append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def _kill(agent: subprocess.Popen) -> None:
    """Lose the machine: its agent and every worker, at once."""
    for pid in [agent.pid, *_descendants(agent.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    agent.wait()


def _records(out: Path) -> list[dict]:
    """Every batch trained: the start (world size, first step, port) it belongs to, the process, the step."""
    rows = []
    for path in out.glob("samples-*.txt"):
        world, first, port, rank = (int(g) for g in _RECORD.fullmatch(path.name).groups())  # type: ignore[union-attr]
        for line in path.read_text().splitlines():
            t, step, epoch, *indices = line.split()
            rows.append({"start": (world, first, port), "rank": rank, "time": float(t), "step": int(step),
                         "epoch": int(epoch), "indices": [int(i) for i in indices]})  # fmt: skip
    return rows


def _last_step(out: Path) -> int:
    return max((r["step"] for r in _records(out)), default=-1)


def _trajectory(out: Path) -> tuple[dict[int, list[int]], list[tuple[int, int, int]]]:
    """The samples each optimizer step trained in the run as it ended (a step that a restart trained again
    counts as the restart trained it), and the starts in the order they ran."""
    by_start: dict[tuple[int, int, int], dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in _records(out):
        by_start[row["start"]][row["step"]].append(row)
    began = {start: min(r["time"] for rows in steps.values() for r in rows) for start, steps in by_start.items()}
    order = sorted(by_start, key=began.__getitem__)
    ended = {start: max(r["time"] for rows in steps.values() for r in rows) for start, steps in by_start.items()}
    for before, after in itertools.pairwise(order):  # the figures in docs/fault-tolerance.md
        print(f"{before[0]} -> {after[0]} processes: {began[after] - ended[before]:.1f} s without training")
    steps: dict[int, list[int]] = {}
    for start in order:  # later starts replace the steps they trained again
        world = start[0]
        for step, rows in by_start[start].items():
            if len(rows) == GLOBAL_BATCH // 4:  # a step every process of that start trained all batches of
                steps[step] = sorted(i for r in rows for i in r["indices"])
            assert len(rows) <= GLOBAL_BATCH // 4, (start, step, len(rows))
            assert {r["rank"] for r in rows} <= set(range(world))
    return steps, order


def _expected_steps() -> dict[int, list[int]]:
    """Each step's samples in the run's global order: DistributedSampler's permutation of the epoch, 16 samples
    a step (the same on any number of processes)."""
    expected = {}
    for epoch in range(EPOCHS):
        order = global_order(Indexed(), 1, True, 0, False, epoch)
        for k in range(STEPS_PER_EPOCH):
            expected[epoch * STEPS_PER_EPOCH + k] = sorted(order[k * GLOBAL_BATCH : (k + 1) * GLOBAL_BATCH])
    return expected


@pytest.fixture(scope="module")
def reference() -> dict[str, torch.Tensor]:
    """The run that never changes size, on one process: 4 batches of 4 per step in the same global order."""
    model = Wide()
    data = Indexed()
    loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, num_replicas=1, rank=0, seed=0))
    trainer = fulmen.Trainer(accelerator="cpu", max_epochs=EPOCHS, accumulate_grad_batches=4, logger=False,
                             enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                             limit_val_batches=0)  # fmt: skip
    trainer.fit(model, loader)
    assert trainer.global_step == EPOCHS * STEPS_PER_EPOCH
    return {k: v.clone() for k, v in model.state_dict().items()}


def _wait(predicate, timeout: float, what: str, agents: list[subprocess.Popen], out: Path) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline or all(a.poll() is not None for a in agents):
            raise AssertionError(f"{what}: not seen in {timeout} s\n{_logs(out)}")
        time.sleep(0.05)


def _logs(out: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(out.glob("agent-*.log")))


def _check(out: Path, reference: dict[str, torch.Tensor]) -> list[tuple[int, int, int]]:
    steps, starts = _trajectory(out)
    assert steps == _expected_steps(), "each optimizer step trains its 16 samples once, none skipped"
    weights = torch.load(out / "final.pt", weights_only=True)
    for key, value in reference.items():
        torch.testing.assert_close(weights[key], value, rtol=0, atol=1e-6, msg=key)
    return starts


def _job(out: Path, agents: list[subprocess.Popen], step: int, event, survivors: list[subprocess.Popen]) -> None:
    """Wait for ``step``, then ``event()`` (a machine lost or joining); the ``survivors`` must end the job."""
    try:
        _wait(lambda: _last_step(out) >= step, 120, f"step {step}", agents, out)
        event()
        for agent in survivors:
            assert agent.wait(timeout=150) == 0, f"changed at step {step}\n{_logs(out)}"
    finally:
        for agent in agents:
            _kill(agent)


@pytest.mark.slow
def test_a_lost_node_leaves_the_job_running_on_the_other_with_the_same_weights(tmp_path, reference):
    port = _free_port()
    kill_at = random.randint(2, 8)  # a random step of the 12 (shown in the assertion message if it fails)
    host, other = _agent(tmp_path, port, True, "a"), _agent(tmp_path, port, False, "b")
    # the whole machine lost: its agent and its 2 workers
    _job(tmp_path, [host, other], kill_at, lambda: _kill(other), survivors=[host])
    starts = _check(tmp_path, reference)
    assert starts[0][0] == 4 and starts[-1][0] == 2, (kill_at, starts)  # began on 2 nodes, ended on 1


@pytest.mark.slow
def test_a_node_that_joins_makes_the_job_continue_on_both(tmp_path, reference):
    port = _free_port()
    join_at = random.randint(2, 4)
    # slower batches: the joining agent needs seconds to start, and the job must still be training then
    agents = [_agent(tmp_path, port, True, "a", pace=0.5)]
    _job(tmp_path, agents, join_at, lambda: agents.append(_agent(tmp_path, port, False, "b", pace=0.5)), agents)
    starts = _check(tmp_path, reference)
    assert starts[0][0] == 2 and starts[-1][0] == 4, (join_at, starts)  # began on 1 node, ended on 2

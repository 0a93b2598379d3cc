"""Who started this process: the ranks and rendezvous address a launcher left in the environment.

Two launchers are read: ``torchrun`` (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK``, ``MASTER_ADDR``/``MASTER_PORT``) and SLURM's ``srun`` (``SLURM_PROCID``, ``SLURM_LOCALID``,
``SLURM_NTASKS``, ``SLURM_NODEID``, ``SLURM_NTASKS_PER_NODE``, ``SLURM_JOB_NODELIST``, ``SLURM_JOB_ID``).
torchrun wins when both are present (``srun torchrun ...``). Nothing here starts a process.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

_TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
LAUNCHER_VARIABLE = "FULMEN_LAUNCHER"
# `salloc` gives an interactive shell whose SLURM_* describe the allocation, not processes srun started
_INTERACTIVE_SLURM_JOBS = ("bash", "interactive")


@dataclass(frozen=True)
class ClusterLayout:
    """The layout of a job: this process's ranks, the job's sizes, and where rank 0 listens."""

    launcher: str  # "torchrun", "slurm", or fulmen's own on one machine: "fulmen" (script), "ddp_spawn"
    world_size: int
    global_rank: int
    local_rank: int
    node_rank: int
    local_world_size: int
    master_addr: str = "127.0.0.1"
    master_port: int | None = None

    @property
    def num_nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))


def detect() -> ClusterLayout | None:
    """The launcher that started this process, or ``None`` when it was started by hand."""
    return torchrun_layout() or slurm_layout()


def _int(name: str, default: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None:
        if default is None:
            raise KeyError(name)
        return default
    match = re.match(r"\s*(\d+)", value)  # SLURM writes counts like "2(x3)"
    if match is None:
        raise ValueError(f"the environment variable {name}={value!r} should be a number.")
    return int(match.group(1))


def torchrun_layout() -> ClusterLayout | None:
    if not all(key in os.environ for key in _TORCHRUN_VARIABLES):
        return None
    world = _int("WORLD_SIZE")
    rank = _int("RANK")
    local_world = _int("LOCAL_WORLD_SIZE", world)
    port = os.environ.get("MASTER_PORT")
    return ClusterLayout(
        # fulmen's launchers set torchrun's variables, and say so
        launcher=os.environ.get(LAUNCHER_VARIABLE, "torchrun"),
        world_size=world,
        global_rank=rank,
        local_rank=_int("LOCAL_RANK"),
        node_rank=_int("GROUP_RANK", rank // max(1, local_world)),
        local_world_size=local_world,
        master_addr=os.environ.get("MASTER_ADDR", "127.0.0.1"),
        master_port=int(port) if port else None,
    )


def slurm_layout() -> ClusterLayout | None:
    """srun started this process as one of several tasks (a single task is a plain process to us: fulmen's
    launcher may still start the other local ranks)."""
    if "SLURM_PROCID" not in os.environ or os.environ.get("SLURM_JOB_NAME") in _INTERACTIVE_SLURM_JOBS:
        return None
    world = _int("SLURM_NTASKS", 1)
    if world <= 1:
        return None
    nodes = _int("SLURM_JOB_NUM_NODES", _int("SLURM_NNODES", 1))
    local_world = _int("SLURM_NTASKS_PER_NODE", max(1, world // nodes))
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST") or "127.0.0.1"
    port = os.environ.get("MASTER_PORT")
    return ClusterLayout(
        launcher="slurm",
        world_size=world,
        global_rank=_int("SLURM_PROCID"),
        local_rank=_int("SLURM_LOCALID", 0),
        node_rank=_int("SLURM_NODEID", 0),
        local_world_size=local_world,
        master_addr=os.environ.get("MASTER_ADDR") or first_host(nodelist),
        # every task derives the same port from the job id, so no task has to tell the others
        master_port=int(port) if port else 20000 + _int("SLURM_JOB_ID", 0) % 20000,
    )


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list: ``"gpu[03-05,9],cpu1"`` → ``"gpu03"``."""
    head = re.match(r"\s*([^,\[]+)(\[([^\]]*)\])?", nodelist)
    if head is None:
        raise ValueError(f"SLURM node list {nodelist!r} is not understood.")
    prefix, ranges = head.group(1), head.group(3)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first

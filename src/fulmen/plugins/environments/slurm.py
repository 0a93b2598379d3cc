"""``SLURMEnvironment``: tasks started by SLURM's ``srun``, and whether the job is requeued on its signal."""

from __future__ import annotations

import os
import re
import signal

from fulmen.plugins.environments.cluster_environment import ClusterEnvironment
from fulmen.utilities.cluster_layout import _INTERACTIVE_SLURM_JOBS, ClusterLayout, slurm_layout


class SLURMEnvironment(ClusterEnvironment):
    """Tasks started by ``srun``. ``auto_requeue``: on ``requeue_signal`` (SIGUSR1 by default; ask SLURM
    for it with ``#SBATCH --signal=SIGUSR1@90``) save a checkpoint, stop and requeue the job, which resumes
    from it; ``False`` saves and stops without requeueing."""

    def __init__(self, auto_requeue: bool = True, requeue_signal: signal.Signals | None = None) -> None:
        self.auto_requeue = auto_requeue
        self.requeue_signal = requeue_signal if requeue_signal is not None else getattr(signal, "SIGUSR1", None)

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @staticmethod
    def detect() -> bool:
        return "SLURM_NTASKS" in os.environ and os.environ.get("SLURM_JOB_NAME") not in ("bash", "interactive")

    @staticmethod
    def job_id() -> int | None:
        """The SLURM job's id (``SLURM_JOB_ID``); None outside a job or in an interactive one (``salloc``'s
        shell), whose logs must not share a job's id."""
        if os.environ.get("SLURM_JOB_NAME") in _INTERACTIVE_SLURM_JOBS:
            return None
        job = os.environ.get("SLURM_JOB_ID")
        try:
            return int(job) if job is not None else None
        except ValueError:
            return None

    @staticmethod
    def job_name() -> str | None:
        return os.environ.get("SLURM_JOB_NAME")

    @staticmethod
    def resolve_root_node_address(nodes: str) -> str:
        """The first host of a SLURM node list: of ``'host0 host1'`` or ``'host0,host1'`` ``'host0'``, of the
        range ``'host[5-9]'`` ``'host5'``."""
        nodes = re.sub(r"\[(.*?)[,-].*\]", "\\1", nodes)  # the first node of every range
        nodes = re.sub(r"\[(.*?)\]", "\\1", nodes)  # a range of one number
        return nodes.split(" ")[0].split(",")[0]

    def layout(self) -> ClusterLayout | None:
        return slurm_layout()  # None for a single task: one process, nothing to rendezvous

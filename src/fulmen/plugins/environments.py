"""Cluster environments: who started the processes and where their ranks come from.

By default fulmen reads the launcher from the environment (torchrun's variables first, then SLURM's srun).
``Trainer(plugins=[SLURMEnvironment(auto_requeue=False)])`` (or ``TorchElasticEnvironment()`` /
``LightningEnvironment()``) names it instead: its variables are the only ones read, and ``SLURMEnvironment``
also decides whether a job is requeued on its signal.
"""

from __future__ import annotations

import os
import signal
from abc import ABC, abstractmethod

from fulmen.strategies.environment import ClusterLayout, slurm_layout, torchrun_layout
from fulmen.utilities.exceptions import MisconfigurationException


class ClusterEnvironment(ABC):
    """What a launcher tells each process. ``layout()`` is what fulmen's DDP strategy reads (None: no
    launcher started this process; fulmen starts the local ranks itself)."""

    @property
    @abstractmethod
    def creates_processes_externally(self) -> bool:
        """Whether the processes are started by something else than fulmen (torchrun, srun)."""

    @staticmethod
    @abstractmethod
    def detect() -> bool:
        """Whether this process runs in this environment."""

    @abstractmethod
    def layout(self) -> ClusterLayout | None:
        """The ranks, sizes and rendezvous address; None when fulmen is to start the processes."""

    def required_layout(self) -> ClusterLayout | None:
        """``layout()``, refused when the plugin names a launcher that did not start this process."""
        layout = self.layout()
        if layout is None and self.creates_processes_externally and not self.detect():
            raise MisconfigurationException(
                f"Trainer(plugins=[{type(self).__name__}()]): this process was not started by that launcher (its "
                "environment variables are missing). Start the script with it, or drop the plugin."
            )
        return layout

    @property
    def main_address(self) -> str:
        layout = self.layout()
        return layout.master_addr if layout is not None else os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        layout = self.layout()
        if layout is not None and layout.master_port is not None:
            return layout.master_port
        return int(os.environ.get("MASTER_PORT", 0))

    def world_size(self) -> int:
        layout = self.layout()
        return layout.world_size if layout is not None else 1

    def global_rank(self) -> int:
        layout = self.layout()
        return layout.global_rank if layout is not None else 0

    def local_rank(self) -> int:
        layout = self.layout()
        return layout.local_rank if layout is not None else 0

    def node_rank(self) -> int:
        layout = self.layout()
        return layout.node_rank if layout is not None else 0

    def set_world_size(self, size: int) -> None:
        """Fixed by the launcher; kept for Lightning's interface."""

    def set_global_rank(self, rank: int) -> None:
        """Fixed by the launcher; kept for Lightning's interface."""

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check the Trainer's devices / num_nodes against the launcher (the DDP strategy does this too)."""

    def teardown(self) -> None:
        pass


class LightningEnvironment(ClusterEnvironment):
    """fulmen starts the processes on this machine itself; a launcher's variables (for instance those of an
    interactive SLURM allocation) are ignored, except the ranks fulmen's own launcher sets for the others."""

    @property
    def creates_processes_externally(self) -> bool:
        return "LOCAL_RANK" in os.environ and os.environ.get("FULMEN_LAUNCHER") is None

    @staticmethod
    def detect() -> bool:
        return True

    def layout(self) -> ClusterLayout | None:
        layout = torchrun_layout()  # the local ranks fulmen started carry torchrun's variables
        return layout if layout is not None and layout.launcher != "torchrun" else None


class TorchElasticEnvironment(ClusterEnvironment):
    """Processes started by ``torchrun`` (torch elastic): ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` ..."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @staticmethod
    def detect() -> bool:
        return all(key in os.environ for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))

    def layout(self) -> ClusterLayout | None:
        return torchrun_layout()


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

    @property
    def job_id(self) -> int | None:
        job = os.environ.get("SLURM_JOB_ID")
        return int(job) if job and job.isdigit() else None

    @property
    def job_name(self) -> str | None:
        return os.environ.get("SLURM_JOB_NAME")

    def layout(self) -> ClusterLayout | None:
        return slurm_layout()  # None for a single task: one process, nothing to rendezvous

"""``MPIEnvironment``: processes started by ``mpirun`` / ``mpiexec`` (through ``mpi4py``)."""

from __future__ import annotations

import socket
from functools import cached_property
from typing import TYPE_CHECKING

from fulmen.plugins._unavailable import require_package
from fulmen.plugins.environments.cluster_environment import ClusterEnvironment
from fulmen.utilities.cluster_layout import ClusterLayout

if TYPE_CHECKING:
    from mpi4py import MPI


class MPIEnvironment(ClusterEnvironment):
    """Processes started by ``mpirun`` / ``mpiexec`` (needs ``mpi4py``): ranks from ``MPI.COMM_WORLD``, the node
    rank from the position of this host among all hosts, the rendezvous address and a free port chosen by rank
    0 and broadcast to the others."""

    def __init__(self) -> None:
        require_package("mpi4py", "mpi4py", "MPIEnvironment", "Install it (with an MPI library) to run under mpirun.")
        self._main_address: str | None = None
        self._main_port: int | None = None

    @cached_property
    def _comm_world(self) -> MPI.Intracomm:
        from mpi4py import MPI

        return MPI.COMM_WORLD

    @cached_property
    def _node(self) -> tuple[int, MPI.Comm]:
        """This host's index among all hosts (sorted), and the communicator of its processes."""
        host = socket.gethostname()
        hosts = sorted(set(self._comm_world.allgather(host)))
        node = hosts.index(host)
        return node, self._comm_world.Split(color=node)

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @staticmethod
    def detect() -> bool:
        try:
            from mpi4py import MPI
        except ImportError:  # not installed, or no MPI library
            return False
        return bool(MPI.COMM_WORLD.Get_size() > 1)

    @property
    def main_address(self) -> str:
        if self._main_address is None:
            self._main_address = self._comm_world.bcast(socket.gethostname(), root=0)
        return self._main_address

    @property
    def main_port(self) -> int:
        if self._main_port is None:
            port = None
            if self._comm_world.Get_rank() == 0:
                with socket.socket() as sock:
                    sock.bind(("", 0))
                    port = int(sock.getsockname()[1])
            self._main_port = int(self._comm_world.bcast(port, root=0))
        return self._main_port

    def world_size(self) -> int:
        return int(self._comm_world.Get_size())

    def global_rank(self) -> int:
        return int(self._comm_world.Get_rank())

    def local_rank(self) -> int:
        return int(self._node[1].Get_rank())

    def node_rank(self) -> int:
        return self._node[0]

    def layout(self) -> ClusterLayout | None:
        if self.world_size() <= 1:
            return None  # one process: fulmen may start the local ranks itself
        return ClusterLayout(
            launcher="mpi", world_size=self.world_size(), global_rank=self.global_rank(), local_rank=self.local_rank(),
            node_rank=self.node_rank(), local_world_size=int(self._node[1].Get_size()), master_addr=self.main_address,
            master_port=self.main_port,
        )  # fmt: skip

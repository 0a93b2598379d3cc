"""``LSFEnvironment``: tasks started by IBM LSF's ``jsrun``."""

from __future__ import annotations

import os
import socket

from fulmen.plugins.environments.cluster_environment import ClusterEnvironment
from fulmen.utilities import cloud_io
from fulmen.utilities.cluster_layout import ClusterLayout


class LSFEnvironment(ClusterEnvironment):
    """Tasks started by IBM LSF's ``jsrun``: ranks from ``JSM_NAMESPACE_SIZE`` / ``JSM_NAMESPACE_RANK`` /
    ``JSM_NAMESPACE_LOCAL_RANK``, hosts from the rank file ``LSB_DJOB_RANKFILE`` (its first line is the launch
    node; the first compute host is the rendezvous address), the port ``MASTER_PORT`` or derived from
    ``LSB_JOBID``. Made only inside such a job: it reads the rank file and exports ``MASTER_ADDR`` /
    ``MASTER_PORT`` for the process group when created."""

    def __init__(self) -> None:
        hosts = self._read_hosts()
        self._hosts = hosts
        self._main_address = hosts[0]
        self._main_port = self._get_main_port()
        self._node_rank = self._get_node_rank()
        os.environ["MASTER_ADDR"] = self._main_address
        os.environ["MASTER_PORT"] = str(self._main_port)

    @staticmethod
    def _read_hosts() -> list[str]:
        path = os.environ.get("LSB_DJOB_RANKFILE")
        if path is None:
            raise ValueError(
                "LSFEnvironment: the environment variable LSB_DJOB_RANKFILE is not set; start the script with "
                "`jsrun` inside an LSF job, or drop the plugin."
            )
        if not path:
            raise ValueError("LSFEnvironment: the environment variable LSB_DJOB_RANKFILE is empty.")
        lines = [line.strip() for line in cloud_io.read_bytes(path).decode("utf-8").splitlines()]
        hosts = [line for line in lines[1:] if line]  # the first line is the launch node, which runs no rank
        if not hosts:
            raise ValueError(f"LSFEnvironment: the rank file {path!r} (LSB_DJOB_RANKFILE) lists no compute host.")
        return hosts

    @staticmethod
    def _get_main_port() -> int:
        if "MASTER_PORT" in os.environ:
            return int(os.environ["MASTER_PORT"])
        if "LSB_JOBID" in os.environ:
            # every task derives the same port from the job id, so no task has to tell the others
            return int(os.environ["LSB_JOBID"]) % 1000 + 10000
        raise ValueError("LSFEnvironment: neither MASTER_PORT nor LSB_JOBID is set; cannot choose the main port.")

    def _get_node_rank(self) -> int:
        host = socket.gethostname()
        nodes = list(dict.fromkeys(self._hosts))  # the hosts in the order they first appear
        if host not in nodes:
            raise KeyError(f"LSFEnvironment: this host {host!r} is not in the rank file's hosts {nodes}.")
        return nodes.index(host)

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @staticmethod
    def detect() -> bool:
        required = ("LSB_JOBID", "LSB_DJOB_RANKFILE", "JSM_NAMESPACE_LOCAL_RANK", "JSM_NAMESPACE_SIZE")
        return all(key in os.environ for key in required)

    @property
    def main_address(self) -> str:
        return self._main_address

    @property
    def main_port(self) -> int:
        return self._main_port

    @staticmethod
    def _jsm(name: str, what: str) -> int:
        value = os.environ.get(name)
        if value is None:
            raise ValueError(
                f"LSFEnvironment: cannot determine the {what}: the environment variable {name} is not set. Start "
                "the script with `jsrun`."
            )
        return int(value)

    def world_size(self) -> int:
        return self._jsm("JSM_NAMESPACE_SIZE", "world size")

    def global_rank(self) -> int:
        return self._jsm("JSM_NAMESPACE_RANK", "global rank")

    def local_rank(self) -> int:
        return self._jsm("JSM_NAMESPACE_LOCAL_RANK", "local rank")

    def node_rank(self) -> int:
        return self._node_rank

    def layout(self) -> ClusterLayout | None:
        if not self.detect():
            return None
        return ClusterLayout(
            launcher="lsf", world_size=self.world_size(), global_rank=self.global_rank(), local_rank=self.local_rank(),
            node_rank=self._node_rank, local_world_size=self._hosts.count(socket.gethostname()),
            master_addr=self._main_address, master_port=self._main_port,
        )  # fmt: skip

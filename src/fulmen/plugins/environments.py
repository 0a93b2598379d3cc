"""Cluster environments: who started the processes and where their ranks come from.

By default fulmen reads the launcher from the environment (torchrun's variables first, then SLURM's srun).
``Trainer(plugins=[SLURMEnvironment(auto_requeue=False)])`` (or ``TorchElasticEnvironment()``,
``LightningEnvironment()``, ``KubeflowEnvironment()``, ``LSFEnvironment()``, ``MPIEnvironment()``) names it
instead: its variables are the only ones read, and ``SLURMEnvironment`` also decides whether a job is
requeued on its signal.

An environment written for Lightning works too: a subclass of this ``ClusterEnvironment`` that implements
Lightning's methods (``world_size()``, ``global_rank()``, ``local_rank()``, ``node_rank()``, ``main_address``,
``main_port``) rather than :meth:`ClusterEnvironment.layout`, and Lightning Fabric's own environment objects,
which :func:`as_cluster_environment` wraps.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
from abc import ABC, abstractmethod
from functools import cached_property
from typing import TYPE_CHECKING, Any

from fulmen.plugins._interop import implements_foreign_base
from fulmen.plugins._unavailable import XLA_INSTEAD, refuse, require_package
from fulmen.strategies.environment import (
    _INTERACTIVE_SLURM_JOBS,
    ClusterLayout,
    slurm_layout,
    torchrun_layout,
)
from fulmen.utilities import cloud_io
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_only

if TYPE_CHECKING:
    from mpi4py import MPI

log = logging.getLogger(__name__)

# Lightning's interface: what fulmen calls on an environment that does not describe itself with `layout()`
_RANK_METHODS = ("world_size", "global_rank", "local_rank", "node_rank", "main_address", "main_port")
_INTERFACE = (*_RANK_METHODS, "creates_processes_externally", "detect", "set_world_size", "set_global_rank")


class ClusterEnvironment(ABC):
    """What a launcher tells each process.

    ``layout()`` is what fulmen's strategies read (None: no launcher started this process; fulmen starts the
    local ranks itself). fulmen's environments implement it; a subclass may implement Lightning's methods
    instead (``world_size()``, ``global_rank()``, and ``local_rank()``, ``node_rank()``, ``main_address``,
    ``main_port`` where the defaults, 0 and ``MASTER_ADDR`` / ``MASTER_PORT``, do not fit), and the layout is
    made from them.
    """

    _expected: tuple[int, int] | None = None  # (devices, num_nodes) of the run, once the Trainer knows them

    @property
    @abstractmethod
    def creates_processes_externally(self) -> bool:
        """Whether the processes are started by something else than fulmen (torchrun, srun)."""

    @staticmethod
    @abstractmethod
    def detect() -> bool:
        """Whether this process runs in this environment."""

    def layout(self) -> ClusterLayout | None:
        """The ranks, sizes and rendezvous address; None when fulmen is to start the processes.

        This default reads Lightning's methods (see the class docstring)."""
        missing = [name for name in ("world_size", "global_rank") if not _overrides(self, name)]
        if missing:
            raise NotImplementedError(
                f"{type(self).__name__} describes no launcher: implement layout(), or Lightning's "
                f"{' and '.join(f'{name}()' for name in missing)} (with local_rank(), node_rank(), main_address "
                "and main_port where the defaults do not fit)."
            )
        return _layout_from_methods(self, self)

    def required_layout(self, processes: int = 2) -> ClusterLayout | None:
        """``layout()``, refused when the plugin names a launcher that did not start this process and the run
        asks for several ``processes``. A one-process run has no ranks to read: a script that always passes the
        plugin (a SLURM job's) also runs on a workstation, on its one device."""
        if processes == 1 and self.creates_processes_externally and not _detected(self):
            return None
        name = type(self.environment if isinstance(self, _WrappedEnvironment) else self).__name__
        try:
            layout = self.layout()
        except (KeyError, ValueError) as err:  # a launcher variable missing or malformed: the exception kept
            raise type(err)(
                f"Trainer(plugins=[{name}()]): reading the ranks failed ({err}); this process was "
                "not started by that launcher, or not as it expects. Start the script with it, or drop the plugin."
            ) from err
        if layout is None and self.creates_processes_externally and not _detected(self):
            raise MisconfigurationException(
                f"Trainer(plugins=[{name}()]): this process was not started by that launcher (its "
                "environment variables are missing). Start the script with it, or drop the plugin."
            )
        return layout

    def expect_processes(self, num_devices: int, num_nodes: int) -> None:
        """The Trainer's devices per node and nodes, told before the layout is read: an environment whose ranks
        are not fixed by its launcher gets its world size and rank from them (see :meth:`layout`)."""
        self._expected = (num_devices, num_nodes)

    @property
    def main_address(self) -> str:
        if _overrides(self, "layout"):
            layout = self.layout()
            if layout is not None:
                return layout.master_addr
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        if _overrides(self, "layout"):
            layout = self.layout()
            if layout is not None and layout.master_port is not None:
                return layout.master_port
        return int(os.environ.get("MASTER_PORT", 0))

    def world_size(self) -> int:
        layout = self._own_layout()
        return layout.world_size if layout is not None else 1

    def global_rank(self) -> int:
        layout = self._own_layout()
        return layout.global_rank if layout is not None else 0

    def local_rank(self) -> int:
        layout = self._own_layout()
        return layout.local_rank if layout is not None else 0

    def node_rank(self) -> int:
        layout = self._own_layout()
        return layout.node_rank if layout is not None else 0

    def _own_layout(self) -> ClusterLayout | None:
        """The layout, when a subclass describes itself with one (the methods above then read it)."""
        return self.layout() if _overrides(self, "layout") else None

    def set_world_size(self, size: int) -> None:
        """Fixed by the launcher; kept for Lightning's interface."""
        log.debug(f"{type(self).__name__}.set_world_size({size}) ignored: the launcher fixes the world size.")

    def set_global_rank(self, rank: int) -> None:
        """Fixed by the launcher; kept for Lightning's interface."""
        log.debug(f"{type(self).__name__}.set_global_rank({rank}) ignored: the launcher fixes the rank.")

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check the Trainer's devices / num_nodes against the launcher (the DDP strategy does this too)."""

    def teardown(self) -> None:
        pass


def _overrides(env: object, name: str) -> bool:
    return getattr(type(env), name, None) is not getattr(ClusterEnvironment, name, None)


def _detected(env: ClusterEnvironment) -> bool:
    try:
        return env.detect()
    except NotImplementedError:  # an environment that cannot tell (Kubeflow): it did not start this process
        return False


def _layout_from_methods(env: Any, owner: ClusterEnvironment) -> ClusterLayout | None:
    """A layout from Lightning's methods of ``env`` (``owner`` is the fulmen environment standing for it).

    - Started by fulmen's own launcher: that layout, told to ``env`` (``set_world_size`` / ``set_global_rank``),
      as Lightning's strategies tell it the ranks they start.
    - Not started externally: None, fulmen starts the processes.
    - Otherwise the environment's ranks; an environment whose ranks are not fixed (``set_*`` take effect) gets
      them from the Trainer's devices and nodes first, as in Lightning.
    """
    launched = torchrun_layout()
    if launched is not None and launched.launcher != "torchrun":
        env.set_world_size(launched.world_size)
        env.set_global_rank(launched.global_rank)
        return launched
    if not env.creates_processes_externally:
        return None
    local_rank = _method(env, "local_rank", 0)
    node_rank = _method(env, "node_rank", 0)
    devices = owner._expected[0] if owner._expected else int(os.environ.get("LOCAL_WORLD_SIZE", 0)) or None
    if devices is not None and owner._expected is not None:
        env.set_global_rank(node_rank * devices + local_rank)
        env.set_world_size(owner._expected[1] * devices)
    world_size = env.world_size()
    return ClusterLayout(
        launcher=type(env).__name__, world_size=world_size, global_rank=env.global_rank(), local_rank=local_rank,
        node_rank=node_rank, local_world_size=devices or world_size, master_addr=str(env.main_address),
        master_port=int(env.main_port),
    )  # fmt: skip


def _method(env: Any, name: str, default: int) -> int:
    """``env.name()`` where the environment has its own, else ``default`` (fulmen's base would recurse)."""
    return int(getattr(env, name)()) if _overrides(env, name) else default


class _WrappedEnvironment(ClusterEnvironment):
    """A Lightning (Fabric) environment object seen as a fulmen one: every method is the wrapped object's, and
    other attributes (``auto_requeue``, ``job_id`` ...) are read from it too. ``environment`` is the object."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        self.detect = environment.detect  # type: ignore[method-assign]  # the object's own, not the class's

    def __getattr__(self, name: str) -> Any:
        if name == "environment":  # not set yet (unpickling): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.environment, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.environment!r})"

    @property
    def creates_processes_externally(self) -> bool:
        return bool(self.environment.creates_processes_externally)

    @staticmethod
    def detect() -> bool:  # replaced per instance by the wrapped object's (see __init__)
        return True

    def layout(self) -> ClusterLayout | None:
        return _layout_from_methods(self.environment, self)

    @property
    def main_address(self) -> str:
        return str(self.environment.main_address)

    @property
    def main_port(self) -> int:
        return int(self.environment.main_port)

    def world_size(self) -> int:
        return int(self.environment.world_size())

    def global_rank(self) -> int:
        return int(self.environment.global_rank())

    def local_rank(self) -> int:
        return int(self.environment.local_rank())

    def node_rank(self) -> int:
        return int(self.environment.node_rank())

    def set_world_size(self, size: int) -> None:
        self.environment.set_world_size(size)

    def set_global_rank(self, rank: int) -> None:
        self.environment.set_global_rank(rank)

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        self.environment.validate_settings(num_devices=num_devices, num_nodes=num_nodes)

    def teardown(self) -> None:
        self.environment.teardown()


def is_foreign_environment(obj: object) -> bool:
    """Whether ``obj`` is a cluster environment written for Lightning (Fabric's, or a subclass of its base)."""
    return not isinstance(obj, ClusterEnvironment) and implements_foreign_base(type(obj), "ClusterEnvironment", _INTERFACE)


def as_cluster_environment(obj: object) -> ClusterEnvironment | None:
    """``obj`` as fulmen's ``ClusterEnvironment``: itself, a Lightning (Fabric) environment wrapped, or None for
    anything else."""
    if isinstance(obj, ClusterEnvironment):
        return obj
    if is_foreign_environment(obj):
        return _WrappedEnvironment(obj)
    return None


def user_environment(env: ClusterEnvironment) -> object:
    """The object the user gave for ``env``: a Lightning (Fabric) environment is unwrapped, so that
    ``strategy.cluster_environment`` is what the user passed (``isinstance`` checks against their class hold)."""
    return env.environment if isinstance(env, _WrappedEnvironment) else env


def environment_of_layout(layout: ClusterLayout | None, world_size: int) -> ClusterEnvironment:
    """The plugin that names the launcher of ``layout`` when the user gave none: torchrun's, SLURM's, or
    fulmen's own (``layout`` None: fulmen starts the ``world_size`` processes itself, or runs this one alone).
    Code written against Lightning reads the strategy's ``cluster_environment`` for the launcher and the ranks."""
    if layout is not None and layout.launcher == "torchrun":
        return TorchElasticEnvironment()
    if layout is not None and layout.launcher == "slurm":
        return SLURMEnvironment()
    environment = LightningEnvironment()
    environment.set_world_size(layout.world_size if layout is not None else world_size)
    environment.set_global_rank(layout.global_rank if layout is not None else 0)
    return environment


class LightningEnvironment(ClusterEnvironment):
    """fulmen starts the processes on this machine itself; a launcher's variables (for instance those of an
    interactive SLURM allocation) are ignored, except the ranks fulmen's own launcher sets for the others.
    ``set_world_size`` / ``set_global_rank`` take effect, as the strategy's plan of the processes."""

    def __init__(self) -> None:
        self._world_size: int | None = None
        self._global_rank: int | None = None

    @property
    def creates_processes_externally(self) -> bool:
        return "LOCAL_RANK" in os.environ and os.environ.get("FULMEN_LAUNCHER") is None

    @staticmethod
    def detect() -> bool:
        return True

    def layout(self) -> ClusterLayout | None:
        layout = torchrun_layout()  # the local ranks fulmen started carry torchrun's variables
        return layout if layout is not None and layout.launcher != "torchrun" else None

    def world_size(self) -> int:
        return self._world_size if self._world_size is not None else super().world_size()

    def set_world_size(self, size: int) -> None:
        self._world_size = size

    def global_rank(self) -> int:
        return self._global_rank if self._global_rank is not None else super().global_rank()

    def set_global_rank(self, rank: int) -> None:
        self._global_rank = rank
        rank_zero_only.rank = rank  # type: ignore[attr-defined]  # rank-zero-only output follows the plan

    def local_rank(self) -> int:
        return int(os.environ.get("LOCAL_RANK", 0))

    def node_rank(self) -> int:
        return int(os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", 0)))


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


class KubeflowEnvironment(ClusterEnvironment):
    """A Kubeflow ``PyTorchJob``: one process per pod, ranked by the operator's ``WORLD_SIZE`` / ``RANK`` /
    ``MASTER_ADDR`` / ``MASTER_PORT``. It cannot be detected (torchrun sets the same variables): name it in
    ``Trainer(plugins=[KubeflowEnvironment()])``."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @staticmethod
    def detect() -> bool:
        raise NotImplementedError(
            "KubeflowEnvironment cannot be detected (its variables are torchrun's too): pass it in "
            "Trainer(plugins=[KubeflowEnvironment()])."
        )

    @property
    def main_address(self) -> str:
        return os.environ["MASTER_ADDR"]

    @property
    def main_port(self) -> int:
        return int(os.environ["MASTER_PORT"])

    def world_size(self) -> int:
        return int(os.environ["WORLD_SIZE"])

    def global_rank(self) -> int:
        return int(os.environ["RANK"])

    def local_rank(self) -> int:
        return 0  # one process per pod

    def node_rank(self) -> int:
        return self.global_rank()  # each pod is a node

    def layout(self) -> ClusterLayout | None:
        if not all(key in os.environ for key in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")):
            return None
        rank = self.global_rank()
        return ClusterLayout(
            launcher="kubeflow", world_size=self.world_size(), global_rank=rank, local_rank=0, node_rank=rank,
            local_world_size=1, master_addr=self.main_address, master_port=self.main_port,
        )  # fmt: skip


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


class XLAEnvironment(ClusterEnvironment):
    """A TPU pod's processes (``torch_xla``). fulmen does not train on XLA devices: without ``torch_xla`` it
    cannot be made (as in Lightning); with it, reading the ranks refuses with what to use instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        require_package("torch_xla", "torch_xla>=1.13", "XLAEnvironment", XLA_INSTEAD)
        super().__init__(*args, **kwargs)

    @property
    def creates_processes_externally(self) -> bool:
        return False

    @staticmethod
    def detect() -> bool:
        return False  # fulmen has no XLA accelerator: never the environment of a fulmen run

    def layout(self) -> ClusterLayout | None:
        refuse("XLAEnvironment (TPU pods)", XLA_INSTEAD)


__all__ = [
    "ClusterEnvironment",
    "KubeflowEnvironment",
    "LSFEnvironment",
    "LightningEnvironment",
    "MPIEnvironment",
    "SLURMEnvironment",
    "TorchElasticEnvironment",
    "XLAEnvironment",
]

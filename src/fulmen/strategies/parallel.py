"""Several processes on ``torch.distributed``: launch, ranks, the process group and the collectives.

The processes come from a launcher (torchrun or SLURM's srun: their environment is read, see
:mod:`fulmen.utilities.cluster_layout`), or, on one machine without a launcher, from fulmen itself: rank 0
runs the user's script again for the other local ranks. :class:`ParallelStrategy` owns all of that; how the
model is replicated or sharded is its subclasses' part (DDP in :mod:`~fulmen.strategies.ddp`, FSDP and 2-D
parallelism in :mod:`~fulmen.strategies.fsdp`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from fulmen.accelerators import Accelerator, accelerator_name
from fulmen.precision import Precision
from fulmen.strategies.launchers.launcher import FOLLOWS_ANOTHER_RANK
from fulmen.strategies.launchers.subprocess_script import (
    REPORTED,
    _SubprocessScriptLauncher,
    ended_children,
    ending_if_a_child_dies,
    launch_local_ranks,
)
from fulmen.strategies.strategy import Strategy
from fulmen.utilities.cluster_layout import ClusterLayout, detect
from fulmen.utilities.exceptions import InvalidValueError, MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_only
from fulmen.utilities.seed import reset_seed

if TYPE_CHECKING:
    from fulmen.plugins.io import CheckpointIO

__all__ = ["ParallelStrategy", "launch_local_ranks"]


def _destroy_group() -> None:
    """At exit: leave the process group, then let gloo's worker threads go idle before the interpreter ends.

    A gloo worker releases a collective's tensors just after the caller's ``wait()`` has returned, and for a
    tensor Python knows that release takes the GIL. Had the interpreter begun to shut down by then, the
    thread was ended inside C++ and the process aborted ("terminate called without an active exception",
    SIGABRT) after a run that had succeeded (seen under torchrun, torch 2.13). Destroying the group does not
    join those threads (DDP's C++ side keeps the group alive), so this waits until each one sleeps.
    """
    if dist.is_initialized():
        dist.destroy_process_group()
    _wait_until_idle("pt_gloo_runloop")


def _wait_until_idle(thread_name: str, timeout: float = 2.0, settle: int = 3) -> None:
    """Sleep (the GIL free) until the threads called ``thread_name`` are asleep at ``settle`` looks in a row."""
    tasks = f"/proc/{os.getpid()}/task"
    if not os.path.isdir(tasks):  # not Linux: a pause long enough for a release already under way
        time.sleep(0.05)
        return
    deadline = time.monotonic() + timeout
    quiet = 0
    while quiet < settle and time.monotonic() < deadline:
        time.sleep(0.01)
        quiet = quiet + 1 if all(state == "S" for state in _thread_states(tasks, thread_name)) else 0


def _thread_states(tasks: str, thread_name: str) -> list[str]:
    """The scheduler states (R running, S sleeping, ...) of this process's threads called ``thread_name``."""
    states = []
    for tid in os.listdir(tasks):
        try:
            with open(f"{tasks}/{tid}/comm") as comm:
                if comm.read().strip() != thread_name:
                    continue
            with open(f"{tasks}/{tid}/stat") as stat:
                states.append(stat.read().rpartition(")")[2].split()[0])
        except (FileNotFoundError, ProcessLookupError, IndexError):  # the thread ended meanwhile
            continue
    return states


DEFAULT_HANG_TIMEOUT = timedelta(minutes=10)
# "no limit" for a wait whose length is the user's work (torch takes a timedelta, not None)
_UNTIMED = timedelta(days=10_000)
HANG_TIMEOUT_ENV = "FULMEN_HANG_TIMEOUT"


def hang_timeout_from_env() -> timedelta | None:
    """``FULMEN_HANG_TIMEOUT`` in seconds (0: no watchdog); 10 minutes when it is not set."""
    raw = os.environ.get(HANG_TIMEOUT_ENV)
    if raw is None or raw.strip() == "":
        return DEFAULT_HANG_TIMEOUT
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise MisconfigurationException(
            f"{HANG_TIMEOUT_ENV}={raw!r}: give the number of seconds a process may make no progress before it is "
            "ended as hung (e.g. 600), or 0 to switch the hang watchdog off."
        )
    return timedelta(seconds=seconds) if seconds > 0 else None


class ParallelStrategy(Strategy):
    """One process per device, in a ``torch.distributed`` process group (gloo on CPUs, NCCL on GPUs).

    ``parallel_devices``: this node's devices, one per process (by default the Trainer's ``devices``);
    ``cluster_environment``: a cluster-environment plugin naming the launcher (by default it is read from the
    environment variables). ``process_group_backend`` defaults to NCCL on CUDA and gloo elsewhere; ``timeout``
    is the group's.
    """

    strategy_name = "parallel"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta = timedelta(minutes=30),
    ) -> None:
        super().__init__(accelerator=accelerator, checkpoint_io=checkpoint_io, precision_plugin=precision_plugin)
        self.cluster_plugin = cluster_environment
        self._process_group_backend = process_group_backend
        self.timeout = timeout
        # how long this process may make no progress before the hang watchdog ends it (utilities/watchdog.py)
        self.hang_timeout: timedelta | None = hang_timeout_from_env()
        self.in_collective: str | None = None  # the collective this process is inside (for the hang report)
        self.collectives_done = 0
        self._num_nodes = 1
        # this node's devices, one per local rank; given here, they win over the Trainer's devices
        self._given_devices = list(parallel_devices) if parallel_devices is not None else None
        self._parallel_devices: list[torch.device] = list(self._given_devices or [])
        self._devices = max(1, len(self.parallel_devices))  # processes per node, from the Trainer's devices
        self._launch = False  # this process starts the other local ranks when the run starts
        self._cluster: ClusterLayout | None = None  # read from the launcher's environment
        # the cluster-environment plugin as the user gave it, or the one naming the launcher, once the Trainer
        # chose this strategy (strategies/factory.py); one assigned to `cluster_environment` wins over both
        self.resolved_environment: object | None = None
        self._assigned_environment: object | None = None

    @property
    def parallel_devices(self) -> list[torch.device]:
        """This node's devices, one per process (the Trainer's ``devices`` unless given to the strategy)."""
        return self._parallel_devices

    @parallel_devices.setter
    def parallel_devices(self, parallel_devices: list[torch.device]) -> None:
        self._parallel_devices = parallel_devices

    @property
    def num_nodes(self) -> int:
        """The machines the run spans (the Trainer's ``num_nodes``)."""
        return self._num_nodes

    @num_nodes.setter
    def num_nodes(self, num_nodes: int) -> None:
        self._num_nodes = num_nodes

    @property
    def process_group_backend(self) -> str | None:
        """The process group's backend: the one given (None: chosen at set-up), then the one in use."""
        return self._process_group_backend

    # -- ranks (from the launcher's environment) ---------------------------------------------------------
    @property
    def cluster_environment(self) -> Any:
        """The cluster-environment plugin the ranks come from: the one given (to the strategy or in the Trainer's
        ``plugins``, as given), else, once a Trainer chose this strategy, the one naming the launcher
        (``TorchElasticEnvironment`` under torchrun, ``SLURMEnvironment`` in a SLURM job, ``LightningEnvironment``
        when fulmen starts the processes). ``None`` for a strategy no Trainer has seen. Code written against
        Lightning reads the launcher and the ranks here; fulmen reads :attr:`cluster_layout`."""
        for environment in (self._assigned_environment, self.resolved_environment, self.cluster_plugin):
            if environment is not None:
                return environment
        return None

    @cluster_environment.setter
    def cluster_environment(self, environment: Any) -> None:
        # reported from now on; until the launcher's environment is read (set-up), the ranks come from it too
        self._assigned_environment = environment

    @property
    def cluster_layout(self) -> ClusterLayout | None:
        """This process's ranks and the job's sizes as the launcher's environment gave them (``None`` until it
        was read at set-up)."""
        return self._cluster

    @property
    def num_processes(self) -> int:
        """Processes on this node (one per device of :attr:`parallel_devices`)."""
        return len(self.parallel_devices)

    def _rank(self, name: str, planned: int) -> int:
        """A rank or size: from the launcher's layout once read; before that from an environment assigned to
        :attr:`cluster_environment`; else as planned from the devices and nodes."""
        cluster = self._cluster
        if cluster is not None:
            return int(getattr(cluster, name))
        assigned = self._assigned_environment
        if assigned is not None:
            return int(getattr(assigned, name)())
        return planned

    @property
    def world_size(self) -> int:
        return self._rank("world_size", self._devices * self.num_nodes)

    @property
    def global_rank(self) -> int:
        return self._rank("global_rank", 0)

    @property
    def local_rank(self) -> int:
        return self._rank("local_rank", 0)

    @property
    def node_rank(self) -> int:
        return self._rank("node_rank", 0)

    # -- set-up -------------------------------------------------------------------------------------------
    def check_launch(
        self, parallel_devices: list[torch.device], num_nodes: int, cluster: ClusterLayout | None
    ) -> None:
        """Plan the processes, one per device of ``parallel_devices`` on each node: those a launcher started
        (checked against devices x ``num_nodes``), or, without a launcher, processes on this machine that fulmen
        starts itself."""
        self.parallel_devices = list(self._given_devices or parallel_devices)
        devices = len(self.parallel_devices)
        self._devices, self.num_nodes = devices, num_nodes
        self._cluster = cluster
        self._launcher = _SubprocessScriptLauncher(self.cluster_plugin, devices, num_nodes)
        if cluster is None:
            if num_nodes > 1:
                raise MisconfigurationException(
                    f"num_nodes={num_nodes}: start the processes on every machine with a launcher, e.g. "
                    f"`torchrun --nnodes={num_nodes} --node_rank=<this machine> --nproc_per_node={devices} "
                    "--master_addr=<first machine> train.py`, or `srun` in a SLURM job with "
                    f"--nodes={num_nodes} --ntasks-per-node={devices} (fulmen starts processes itself on one "
                    "machine only)."
                )
            self._launch = True
            return
        if cluster.local_world_size != devices or devices * num_nodes != cluster.world_size:
            how = (
                f"#SBATCH --nodes={num_nodes} --ntasks-per-node={devices}"
                if cluster.launcher == "slurm"
                else f"torchrun --nnodes={num_nodes} --nproc_per_node={devices}"
            )
            # a ValueError as Lightning's (and still a MisconfigurationException, which fulmen raised before)
            raise InvalidValueError(
                f"Trainer(devices={devices}, num_nodes={num_nodes}) asks for {devices * num_nodes} processes, but "
                f"{cluster.launcher} started {cluster.world_size} with {cluster.local_world_size} per node. Make "
                f"them agree: launch with `{how}`, or set devices={cluster.local_world_size}, "
                f"num_nodes={cluster.num_nodes}."
            )

    def _detect(self) -> ClusterLayout | None:
        plugin = self.cluster_plugin
        return detect() if plugin is None else plugin.layout()

    def _sync_layers(self, module: nn.Module, undo: bool = False) -> None:
        """Apply (``undo``: revert) the run's ``LayerSync`` (``sync_batchnorm``) to ``module``'s layers. The module
        itself is kept (the Trainer and callbacks hold it): the plugin must swap its children in place."""
        layer_sync = self._layer_sync
        if layer_sync is None:
            return
        result = layer_sync.revert(module) if undo else layer_sync.apply(module)
        if result is not module:
            method = "revert" if undo else "apply"
            raise MisconfigurationException(
                f"{type(layer_sync).__name__}.{method}(module) returned a different module ({type(result).__name__}); "
                "it must convert the LightningModule's layers in place and return the module it was given."
            )

    def setup_environment(self) -> None:
        launcher = self._launcher
        if self._launch and isinstance(launcher, _SubprocessScriptLauncher):
            launcher.start_children()  # once: fit's launch may have started them already
        cluster = self._cluster = self._detect()
        if cluster is None:
            raise MisconfigurationException(
                f"strategy={self.strategy_name!r} found no launcher environment (RANK, WORLD_SIZE, ... or SLURM_PROCID, ...) when "
                "the run started. Launch with torchrun or srun, or let fulmen start the processes (devices>1)."
            )
        hardware = accelerator_name(self.accelerator) if self.accelerator is not None else "cpu"
        if hardware == "cuda":
            # local rank i trains on the i-th device the Trainer was given (devices=[2, 3]: cuda:2 and cuda:3)
            listed = self.parallel_devices
            local = self.local_rank
            self._root_device = listed[local] if local < len(listed) else torch.device("cuda", local)
            torch.cuda.set_device(self._root_device)
        else:
            self._root_device = torch.device("cpu")
        self.setup_distributed()
        super().setup_environment()

    def setup_distributed(self) -> None:
        """Join the process group (NCCL on GPUs, gloo elsewhere, unless ``process_group_backend`` names one), with
        the ranks the launcher's environment gave (read by ``setup_environment``), then :meth:`set_world_ranks`;
        every process then starts from ``seed_everything``'s seed again."""
        cluster = self._cluster
        assert cluster is not None, "setup_environment reads the launcher's environment first"
        launcher = self._launcher
        # init_process_group's env:// rendezvous reads these; SLURM does not set them
        os.environ.setdefault("MASTER_ADDR", cluster.master_addr)
        if cluster.master_port is not None:
            os.environ.setdefault("MASTER_PORT", str(cluster.master_port))
        backend = self.process_group_backend or ("nccl" if self._root_device.type == "cuda" else "gloo")
        self._process_group_backend = backend
        if not dist.is_initialized():
            started = launcher.procs if isinstance(launcher, _SubprocessScriptLauncher) else []
            with ending_if_a_child_dies(started):
                dist.init_process_group(
                    backend, rank=self.global_rank, world_size=self.world_size, timeout=self.timeout,
                    store=self._elastic_store(),
                )  # fmt: skip
            # torch asks for the group to be destroyed before the process ends: left to interpreter shutdown,
            # its threads were once torn down in an order that aborted the process (SIGABRT) after a clean run
            atexit.register(_destroy_group)
        self.set_world_ranks()
        # every process starts the run from seed_everything's seed, whatever it drew since (building the
        # model...), as Lightning's DDP does: seeded runs then match Lightning's, started processes included
        reset_seed()

    def set_world_ranks(self) -> None:
        """Tell the cluster-environment plugin (when one was given) this process's global rank and the world
        size, and make rank-zero-only output follow this rank."""
        told = {id(e): e for e in (self.cluster_plugin, self.cluster_environment) if e is not None}  # each once
        for environment in told.values():
            for setter, value in (("set_global_rank", self.global_rank), ("set_world_size", self.world_size)):
                method = getattr(environment, setter, None)
                if callable(method):
                    method(value)
        rank_zero_only.rank = self.global_rank  # type: ignore[attr-defined]

    def _elastic_store(self) -> dist.Store | None:
        """Under torchrun's agent, the rendezvous store of this attempt, keyed by the restart count.

        torchrun keeps one store for the whole job; after an elastic restart the default rendezvous found the
        previous attempt's addresses there and the new processes could not connect (torch 2.13, gloo). A
        prefix per attempt keeps each attempt's keys apart. ``None``: the default env:// rendezvous.
        """
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" or "MASTER_PORT" not in os.environ:
            return None
        client = dist.TCPStore(
            os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ["MASTER_PORT"]), self.world_size,
            is_master=False, timeout=self.timeout,
        )  # fmt: skip
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        return dist.PrefixStore(f"fulmen/attempt_{attempt}", client)

    @property
    def is_distributed(self) -> bool:
        return True

    def prepare_for_tuning(self) -> None:
        """The process group, for a tuner run before fit: the processes agree on its results through it."""
        self.setup_environment()

    def on_exception(self, exception: BaseException) -> None:
        """Say which rank failed, and end this process's part of the group at once: the other ranks' next
        collective then fails within moments instead of waiting out the process-group timeout."""
        where = f"rank {self.global_rank} of {self.world_size} (node {self.node_rank}, local rank {self.local_rank})"
        launcher = self._launcher
        dead = ended_children(launcher.procs) if isinstance(launcher, _SubprocessScriptLauncher) else []
        REPORTED.update(dead)
        if dead:
            cause = "; ".join(dead)
            hint = f"{cause}; this rank's error follows from that."
        elif "find_unused_parameters=True" in str(exception):  # torch's advice, in fulmen's words
            hint = (
                "some parameters got no gradient in a backward (e.g. frozen by toggle_model): use "
                "strategy='ddp_find_unused_parameters_true' or DDPStrategy(find_unused_parameters=True)."
            )
        elif isinstance(exception, dist.DistBackendError) or "Connection closed by peer" in str(exception):
            hint = f"{FOLLOWS_ANOTHER_RANK}: look for its error (or the launcher's report)."
        else:
            hint = ""
        print(f"fulmen: {where} failed with {type(exception).__name__}: {exception}" + (f"\n  {hint}" if hint else ""),
              file=sys.stderr, flush=True)  # fmt: skip
        if hasattr(exception, "add_note"):  # Python >= 3.11
            exception.add_note(f"(raised on {where}{'; ' + hint if hint else ''})")
        if dist.is_initialized():
            # gloo's workers first release the tensors of the last collectives (which takes the GIL): on older
            # torch (2.7 for one) destroying the group while one still does deadlocked this process
            _wait_until_idle("pt_gloo_runloop")
            dist.destroy_process_group()

    # -- collectives ------------------------------------------------------------------------------------
    def reduce(self, tensor: Any, group: Any = None, reduce_op: str | None = "mean") -> Any:
        if not isinstance(tensor, Tensor) or not dist.is_initialized():
            return tensor
        op = (reduce_op or "mean").lower()
        if op not in ("mean", "avg", "sum", "max", "min"):
            raise ValueError(f"reduce_op={reduce_op!r}: use 'mean', 'sum', 'max' or 'min'.")
        result = tensor.detach().clone().float() if op in ("mean", "avg") else tensor.detach().clone()
        torch_op = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}.get(op, dist.ReduceOp.SUM)
        self.in_collective = f"all_reduce ({op})"
        dist.all_reduce(result, op=torch_op, group=group)
        self._left_collective()
        if op in ("mean", "avg"):
            result = (result / dist.get_world_size(group)).to(tensor.dtype)
        return result

    def sync_metric(self, tensor: Tensor, reduce_op: str) -> Tensor:
        return self.reduce(tensor, reduce_op=reduce_op)

    def _left_collective(self) -> None:
        self.in_collective = None
        self.collectives_done += 1

    def barrier(self, name: str | None = None) -> None:
        if dist.is_initialized():
            self.in_collective = f"barrier ({name})" if name else "barrier"
            dist.barrier()
            self._left_collective()

    @contextlib.contextmanager
    def all_wait_after(self, name: str) -> Iterator[None]:
        if not dist.is_initialized():
            yield
            return
        # a group of its own without the process group's timeout (30 min by default): a download may take
        # longer; the group is made before the block, as every process gets there at once
        group = dist.new_group(backend="gloo", timeout=_UNTIMED)
        try:
            yield
            self.in_collective = f"barrier ({name}, waiting for every process to finish it)"
            dist.barrier(group=group)
            self._left_collective()
        finally:
            dist.destroy_process_group(group)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if not dist.is_initialized():
            return obj
        holder = [obj]
        self.in_collective = "broadcast"
        dist.broadcast_object_list(holder, src=src)
        self._left_collective()
        return holder[0]

    def gather_objects(self, obj: Any) -> list[Any] | None:
        if not dist.is_initialized():
            return None
        gathered: list[Any] = [None] * dist.get_world_size()
        self.in_collective = "all_gather_object"
        dist.all_gather_object(gathered, obj)
        self._left_collective()
        return gathered

    def all_gather(self, tensor: Tensor, group: Any = None, sync_grads: bool = False) -> Tensor:
        if not dist.is_initialized():
            return tensor
        world = dist.get_world_size(group)
        if sync_grads:
            import torch.distributed.nn.functional as dist_fn

            return torch.stack(dist_fn.all_gather(tensor.contiguous(), group=group or dist.group.WORLD))
        gathered = [torch.empty_like(tensor) for _ in range(world)]
        dist.all_gather(gathered, tensor.contiguous(), group=group)
        return torch.stack(gathered)

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        if not dist.is_initialized():
            return decision
        votes = torch.tensor(int(bool(decision)), device=self._root_device)
        dist.all_reduce(votes, op=dist.ReduceOp.SUM)
        count = int(votes.item())
        return count == self.world_size if all else count > 0


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "CheckpointIO": "fulmen.plugins.io.checkpoint_plugin.CheckpointIO",
    "ClusterEnvironment": "fulmen.plugins.environments.ClusterEnvironment",
    "LayerSync": "fulmen.plugins.layer_sync.LayerSync",
})  # fmt: skip

"""Which strategy a Trainer runs with, from its flags: ``select_strategy``.

The answer depends on ``strategy=`` (a name or an instance), the devices and nodes, and whether a launcher
(torchrun, SLURM) started this process. Nothing else in fulmen asks which strategy class is in use.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from fulmen.precision import Precision, select_precision
from fulmen.strategies.ddp import DDPStrategy
from fulmen.strategies.ddp_spawn import DDPSpawnStrategy
from fulmen.strategies.deepspeed import DeepSpeedStrategy
from fulmen.strategies.fsdp import FSDPStrategy
from fulmen.strategies.parallel import ParallelStrategy
from fulmen.strategies.registry import StrategyRegistry
from fulmen.strategies.single_device import SingleDeviceStrategy
from fulmen.strategies.single_xla import SingleDeviceXLAStrategy
from fulmen.strategies.strategy import Strategy
from fulmen.strategies.xla import XLAStrategy
from fulmen.utilities.cluster_layout import ClusterLayout
from fulmen.utilities.cluster_layout import detect as detect_cluster
from fulmen.utilities.exceptions import InvalidValueError, MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    import torch

    from fulmen.accelerators import Accelerator

DDP_NAMES = ("ddp", "ddp_spawn", "ddp_fork", "ddp_notebook")
FSDP_NAMES = ("fsdp", "fsdp_cpu_offload")
_NOT_AVAILABLE = ("hpu_parallel", "single_hpu")


def _ddp_kind(name: str | None) -> tuple[str, bool] | None:
    """'ddp_spawn_find_unused_parameters_true' -> ('ddp_spawn', True); None for names that are not DDP."""
    if name is None:
        return None
    if name in _NOT_AVAILABLE:
        raise MisconfigurationException(
            f"strategy={name!r} is not available in fulmen (it trains on torch.distributed: DDP, FSDP and model "
            "parallelism). Use strategy='ddp' or 'fsdp'."
        )
    for suffix, find_unused in (("_find_unused_parameters_true", True), ("_find_unused_parameters_false", False)):
        if name.endswith(suffix):
            base = name.removesuffix(suffix)
            return (base, find_unused) if base in DDP_NAMES else None
    return (name, False) if name in DDP_NAMES else None


def select_strategy(
    strategy: str | Strategy, accelerator: Accelerator, devices: list[torch.device], num_nodes: int,
    precision: str, precision_plugin: Precision | None = None, sync_batchnorm: bool = False,
    environment: Any = None, interactive: bool = False,
) -> Strategy:  # fmt: skip
    """The strategy for these (validated) flags; a Strategy instance gets the Trainer's accelerator and
    precision where it left them at their defaults. ``environment``: a cluster-environment plugin that names
    the launcher (otherwise it is detected from the environment variables). ``interactive``: Python runs
    interactively (a REPL, a notebook), where ``'auto'`` over several devices forks the processes, as Lightning
    does: there is no script for them to run again."""
    if isinstance(strategy, Strategy) and strategy.cluster_plugin is not None:
        given = [getattr(env, "environment", env) for env in (environment, strategy.cluster_plugin)]  # unwrapped
        if environment is not None and given[0] is not given[1]:
            raise MisconfigurationException(
                f"The cluster environment is set both by {type(strategy).__name__}(cluster_environment="
                f"{type(strategy.cluster_plugin).__name__}()) and by Trainer(plugins=[{type(environment).__name__}()]). "
                "Pass it in one place."
            )
        environment = strategy.cluster_plugin  # a strategy's own cluster_environment=
    if environment is None and detect_cluster() is None:
        environment = _job_environment()
    if environment is not None:
        environment = _cluster_environment(environment)
        environment.expect_processes(len(devices), num_nodes)
    cluster = detect_cluster() if environment is None else environment.required_layout(len(devices) * num_nodes)
    precision_ = precision_plugin or select_precision(precision, devices[0].type)
    chosen = _select(strategy, accelerator, devices, num_nodes, precision_, cluster, environment, interactive)
    if isinstance(chosen, ParallelStrategy):
        chosen.resolved_environment = _reported_environment(environment, cluster, len(devices) * num_nodes)
    if environment is not None and chosen.is_distributed:
        environment.validate_settings(num_devices=len(devices), num_nodes=num_nodes)
    if sync_batchnorm and chosen.is_distributed and accelerator.name == "cpu":
        raise MisconfigurationException(
            "Trainer(sync_batchnorm=True) turns BatchNorm layers into torch.nn.SyncBatchNorm, which torch runs "
            "on GPUs only, but accelerator='cpu'. Use sync_batchnorm=False on CPUs."
        )
    if sync_batchnorm and not chosen.is_distributed:
        rank_zero_warn("Trainer(sync_batchnorm=True) has no effect with one process (it syncs across DDP ranks).")
    return chosen


# variables an MPI launcher sets in the processes it starts (MPICH / Intel MPI's hydra, Open MPI, PMIx)
_MPI_LAUNCH_VARIABLES = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")


def _job_environment() -> Any:
    """The environment of an LSF job (``jsrun``) or of processes ``mpirun`` started, which name no torchrun or
    SLURM variables; ``None`` otherwise. MPI is asked only when an MPI launcher's variables are set: importing
    ``mpi4py.MPI`` initialises MPI, which an ordinary process should not pay for (Lightning asks in every one)."""
    lsf = "LSB_JOBID" in os.environ
    mpi = any(key in os.environ for key in _MPI_LAUNCH_VARIABLES)
    if not (lsf or mpi):
        return None
    from fulmen.plugins.environments import LSFEnvironment, MPIEnvironment  # only for such a job (see below)

    if lsf and LSFEnvironment.detect():
        return LSFEnvironment()
    if mpi and MPIEnvironment.detect():
        return MPIEnvironment()
    return None


def _reported_environment(environment: Any, cluster: ClusterLayout | None, world_size: int) -> object:
    """What ``strategy.cluster_environment`` reports: the plugin as the user gave it, else the one naming the
    launcher of ``cluster``."""
    # the cluster-environment plugins load when a strategy is chosen, not with fulmen: `import fulmen` stays cheap
    from fulmen.plugins.environments import environment_of_layout, user_environment

    return (
        user_environment(environment)
        if environment is not None
        else environment_of_layout(cluster, world_size)
    )


def _cluster_environment(environment: Any) -> Any:
    """fulmen's ``ClusterEnvironment`` for ``environment``; a Lightning (Fabric) one is wrapped."""
    from fulmen.plugins.environments import as_cluster_environment  # see _reported_environment

    found = as_cluster_environment(environment)
    if found is None:
        raise MisconfigurationException(
            f"cluster_environment={environment!r} is not a cluster environment. Pass one from "
            "fulmen.plugins.environments (SLURMEnvironment(), TorchElasticEnvironment(), ...), or Lightning's."
        )
    return found


_FACTORY_NAMES = frozenset({*FSDP_NAMES, "deepspeed", "xla", "single_xla", "single_device"})


def _built_from_registry(name: str) -> bool:
    """Names a user registered (or replaced), and built-in names the factory has no recipe of its own for
    (``"deepspeed_stage_3"``, ``"xla_debug"`` ...); the factory builds the others from the flags."""
    if StrategyRegistry.is_user_entry(name):
        return True
    return name in StrategyRegistry and name not in _FACTORY_NAMES and _ddp_kind(name) is None


def _select(
    strategy: Any, accelerator: Accelerator, devices: list[torch.device], num_nodes: int, precision: Precision,
    cluster: Any, environment: Any, interactive: bool = False,
) -> Strategy:  # fmt: skip
    device = devices[0]
    if isinstance(strategy, str) and _built_from_registry(strategy):
        strategy = StrategyRegistry.get(strategy)
    if isinstance(strategy, Strategy):
        _complete(strategy, accelerator, precision, environment)
        strategy.check_launch(devices, num_nodes, cluster)
        return strategy
    name = strategy.lower() if isinstance(strategy, str) else None
    named = _of_its_own_class(name, device, accelerator, precision, environment)
    if named is not None:
        named.check_launch(devices, num_nodes, cluster)
        return named
    ddp_kind = _ddp_kind(name)
    if name not in ("auto", "single_device") and ddp_kind is None:
        raise InvalidValueError(
            f"strategy={strategy!r} is not supported. Use 'auto', 'single_device', 'ddp', 'ddp_spawn', "
            "'ddp_fork', 'ddp_notebook' (each DDP name also with '_find_unused_parameters_true'), 'fsdp', "
            "'fsdp_cpu_offload', a name registered with StrategyRegistry.register(...), or a Strategy instance "
            "such as DDPStrategy(...), FSDPStrategy(...) or ModelParallelStrategy(...)."
        )
    processes = len(devices) * num_nodes
    launched = cluster is not None and cluster.world_size > 1
    if ddp_kind is None and name == "auto" and (processes > 1 or launched):
        fork = interactive and not launched and num_nodes == 1 and len(devices) > 1
        ddp_kind = ("ddp_fork" if fork else "ddp", False)
    if ddp_kind is None:
        if processes > 1:
            raise MisconfigurationException(
                f"strategy={strategy!r} runs one process, but devices={len(devices)} and num_nodes={num_nodes} "
                f"ask for {processes}. Use strategy='ddp' (or 'auto'), or devices=1."
            )
        return SingleDeviceStrategy(device=device, accelerator=accelerator, precision_plugin=precision)
    base, find_unused = ddp_kind
    # one device outside a launcher trains exactly like one process: no group needed
    if base == "ddp" and processes == 1 and cluster is None:
        return SingleDeviceStrategy(device=device, accelerator=accelerator, precision_plugin=precision)
    ddp = _ddp(base, find_unused, accelerator, precision)
    ddp.cluster_plugin = environment
    ddp.check_launch(devices, num_nodes, cluster)
    return ddp


def _complete(strategy: Strategy, accelerator: Accelerator, precision: Precision, environment: Any) -> None:
    """A Strategy instance given to the Trainer takes the Trainer's accelerator and precision where it left them
    at their defaults, and the Trainer's cluster environment."""
    strategy.accelerator = strategy.accelerator or accelerator
    if type(strategy.precision_plugin) is Precision:  # left at the default: use the Trainer's
        strategy.precision_plugin = precision
    strategy.cluster_plugin = environment


def _of_its_own_class(
    name: str | None, device: torch.device, accelerator: Accelerator, precision: Precision, environment: Any
) -> Strategy | None:
    """The strategy for an FSDP, DeepSpeed or XLA name (each a class of its own, not yet checked against the
    processes started); None for other names."""
    if name in FSDP_NAMES:
        fsdp = FSDPStrategy(accelerator=accelerator, precision_plugin=precision, cpu_offload=name == "fsdp_cpu_offload")
        fsdp.cluster_plugin = environment
        return fsdp
    if name in ("deepspeed", "xla", "single_xla"):  # they need their packages (the constructors say which)
        return (
            DeepSpeedStrategy(accelerator=accelerator, precision_plugin=precision) if name == "deepspeed"
            else XLAStrategy(accelerator=accelerator, precision_plugin=precision) if name == "xla"
            else SingleDeviceXLAStrategy(device, accelerator=accelerator, precision_plugin=precision)
        )  # fmt: skip
    return None


def _ddp(base: str, find_unused: bool, accelerator: Accelerator, precision: Precision) -> DDPStrategy:
    """A DDP strategy of kind ``base`` (``"ddp"``, or ``"ddp_spawn"`` / ``"ddp_fork"`` / ``"ddp_notebook"``,
    which start their processes themselves)."""
    if base == "ddp":
        return DDPStrategy(accelerator=accelerator, precision_plugin=precision, find_unused_parameters=find_unused)
    ddp = DDPSpawnStrategy(
        accelerator=accelerator, precision_plugin=precision, find_unused_parameters=find_unused,
        start_method="spawn" if base == "ddp_spawn" else "fork",
    )  # fmt: skip
    ddp.strategy_name = base
    return ddp

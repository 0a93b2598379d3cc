"""Kubeflow, LSF and MPI environments read what Lightning's read (Lightning's classes as the oracle, on the same
monkeypatched variables); XLA's refuses; Lightning Fabric's environment objects (and environments written to
Lightning's interface) are taken in plugins= and in a strategy's cluster_environment=."""

from __future__ import annotations

import contextlib
import importlib
import os
import socket

import pytest

import fulmen
from fulmen.plugins.environments import (
    ClusterEnvironment,
    KubeflowEnvironment,
    LSFEnvironment,
    MPIEnvironment,
    XLAEnvironment,
    as_cluster_environment,
)
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import package_available
from tests.parity import oracle

_LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK", "MASTER_ADDR",
                     "MASTER_PORT", "FULMEN_LAUNCHER", "LSB_JOBID", "LSB_DJOB_RANKFILE", "JSM_NAMESPACE_LOCAL_RANK",
                     "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_RANK")  # fmt: skip


@pytest.fixture
def clean_env(monkeypatch):
    for key in [k for k in os.environ if k.startswith("SLURM_")] + list(_LAUNCH_VARIABLES):
        monkeypatch.delenv(key, raising=False)
    # a Trainer made in a simulated job (rank 3 of 4) sets the rank the rank-zero helpers read, Lightning's
    # included: put them back afterwards, or later tests' rank-zero warnings go silent
    from fulmen.utilities.rank_zero import rank_zero_only

    helpers = [rank_zero_only]
    for module in ("lightning.fabric.utilities.rank_zero", "lightning_utilities.core.rank_zero"):
        with contextlib.suppress(ImportError):  # the oracle's, where installed
            helpers.append(importlib.import_module(module).rank_zero_only)
    for helper in helpers:
        monkeypatch.setattr(helper, "rank", getattr(helper, "rank", 0), raising=False)
    return monkeypatch


def _same_answers(ours, theirs) -> None:
    for method in ("world_size", "global_rank", "local_rank", "node_rank"):
        assert getattr(ours, method)() == getattr(theirs, method)(), method
    for prop in ("main_address", "main_port", "creates_processes_externally"):
        assert getattr(ours, prop) == getattr(theirs, prop), prop


@oracle.parity
def test_kubeflow_reads_lightnings_variables(clean_env):
    oracle.lightning()
    from lightning.pytorch.plugins.environments import KubeflowEnvironment as Theirs

    for key, value in {"WORLD_SIZE": "4", "RANK": "3", "MASTER_ADDR": "pod-0", "MASTER_PORT": "23456"}.items():
        clean_env.setenv(key, value)
    ours, theirs = KubeflowEnvironment(), Theirs()
    _same_answers(ours, theirs)
    with pytest.raises(NotImplementedError):
        Theirs.detect()
    with pytest.raises(NotImplementedError, match="cannot be detected"):
        KubeflowEnvironment.detect()
    trainer = fulmen.Trainer(accelerator="cpu", devices=1, num_nodes=4, strategy="ddp", plugins=[ours], logger=False)
    assert (trainer.world_size, trainer.global_rank, trainer.local_rank, trainer.node_rank) == (4, 3, 0, 3)


def test_kubeflow_outside_a_job_is_refused_clearly(clean_env):
    with pytest.raises(KeyError):
        KubeflowEnvironment().world_size()  # as Lightning's: the variable is read as it is asked for
    with pytest.raises(MisconfigurationException, match=r"KubeflowEnvironment\(\)\]\): this process was not started"):
        fulmen.Trainer(accelerator="cpu", devices=1, num_nodes=2, strategy="ddp", plugins=[KubeflowEnvironment()])


@oracle.parity
@pytest.mark.parametrize("root", ["fulmen", "lightning.pytorch"])
def test_a_job_plugin_outside_its_job_trains_on_one_device(clean_env, tmp_path, root):
    """A script that always passes ``SLURMEnvironment()`` (written for the cluster) also runs on a workstation, on
    one device: one process has no ranks to read. Asking for several processes there is refused."""
    if root != "fulmen":
        oracle.lightning()
    pl = importlib.import_module(root)
    environments = importlib.import_module(f"{root}.plugins.environments")
    demos = importlib.import_module(f"{root}.demos.boring_classes")
    trainer = pl.Trainer(plugins=[environments.SLURMEnvironment()], accelerator="cpu", devices=1, max_steps=1,
                         default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                         enable_checkpointing=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(demos.BoringModel())
    assert trainer.global_step == 1 and trainer.world_size == 1
    if root == "fulmen":  # Lightning's fails later, reading SLURM_NODEID
        with pytest.raises(MisconfigurationException, match=r"SLURMEnvironment\(\)\]\): this process was not started"):
            pl.Trainer(plugins=[environments.SLURMEnvironment()], accelerator="cpu", devices=2)


def _lsf_job(monkeypatch, tmp_path, rank: int, local_rank: int, with_port: bool = False):
    host = socket.gethostname()
    rankfile = tmp_path / "rankfile"
    rankfile.write_text(f"launch-node\notherhost\notherhost\n{host}\n{host}\n")
    variables = {"LSB_JOBID": "1234567", "LSB_DJOB_RANKFILE": str(rankfile), "JSM_NAMESPACE_SIZE": "4",
                 "JSM_NAMESPACE_RANK": str(rank), "JSM_NAMESPACE_LOCAL_RANK": str(local_rank)}  # fmt: skip
    if with_port:
        variables["MASTER_PORT"] = "29999"
    for key, value in variables.items():
        monkeypatch.setenv(key, value)


@oracle.parity
@pytest.mark.parametrize("with_port", [False, True])
def test_lsf_reads_lightnings_variables_and_rank_file(clean_env, tmp_path, with_port):
    oracle.lightning()
    from lightning.pytorch.plugins.environments import LSFEnvironment as Theirs

    _lsf_job(clean_env, tmp_path, rank=3, local_rank=1, with_port=with_port)
    theirs = Theirs()
    exported = (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"])
    clean_env.delenv("MASTER_ADDR")
    if not with_port:
        clean_env.delenv("MASTER_PORT")
    ours = LSFEnvironment()
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == exported  # for the process group, as Lightning
    _same_answers(ours, theirs)
    assert ours.detect() == Theirs.detect() is True
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp", plugins=[ours], logger=False)
    assert (trainer.world_size, trainer.global_rank, trainer.local_rank, trainer.node_rank) == (4, 3, 1, 1)


@oracle.parity
def test_lsf_outside_a_job_fails_as_lightnings(clean_env, tmp_path):
    oracle.lightning()
    from lightning.pytorch.plugins.environments import LSFEnvironment as Theirs

    assert not LSFEnvironment.detect() and not Theirs.detect()
    with pytest.raises(ValueError):
        Theirs()
    with pytest.raises(ValueError, match="LSB_DJOB_RANKFILE is not set.*jsrun"):
        LSFEnvironment()
    _lsf_job(clean_env, tmp_path, rank=0, local_rank=0)
    clean_env.delenv("JSM_NAMESPACE_RANK")
    with pytest.raises(ValueError):
        Theirs().global_rank()
    with pytest.raises(ValueError, match="JSM_NAMESPACE_RANK is not set"):
        LSFEnvironment().global_rank()


@oracle.parity
def test_packages_missing_here_fail_at_construction_as_in_lightning():
    oracle.lightning()
    from lightning.pytorch.plugins.environments import MPIEnvironment as TheirMPI
    from lightning.pytorch.plugins.environments import XLAEnvironment as TheirXLA

    with pytest.raises(ModuleNotFoundError):
        TheirXLA()
    with pytest.raises(ModuleNotFoundError, match="torch_xla.*CPUs and GPUs"):
        XLAEnvironment()
    assert not XLAEnvironment.detect() and not TheirXLA.detect()
    if not package_available("mpi4py"):
        with pytest.raises(ModuleNotFoundError):
            TheirMPI()
        with pytest.raises(ModuleNotFoundError, match="pip install -U 'mpi4py'"):
            MPIEnvironment()
        assert not MPIEnvironment.detect() and not TheirMPI.detect()


@oracle.parity
def test_mpi_with_mpi4py_answers_as_lightnings():
    """A single MPI process (mpi4py and an MPI library come with the test extras; skipped without them)."""
    pytest.importorskip("mpi4py.MPI")
    oracle.lightning()
    from lightning.pytorch.plugins.environments import MPIEnvironment as Theirs

    ours, theirs = MPIEnvironment(), Theirs()
    for method in ("world_size", "global_rank", "local_rank", "node_rank"):
        assert getattr(ours, method)() == getattr(theirs, method)(), method
    assert ours.main_address == theirs.main_address == socket.gethostname()
    assert ours.main_port > 0 and ours.main_port == ours.main_port  # chosen once
    assert ours.detect() == Theirs.detect() is False  # one process
    assert ours.layout() is None  # one process: fulmen may start the local ranks itself


@oracle.parity
def test_fabric_environments_are_taken_in_plugins(clean_env):
    oracle.lightning()
    from lightning.fabric.plugins.environments import LightningEnvironment as FabricLightning
    from lightning.fabric.plugins.environments import SLURMEnvironment as FabricSLURM

    wrapped = fulmen.Trainer(plugins=[FabricLightning()], logger=False).config.cluster_environment
    assert isinstance(wrapped, ClusterEnvironment) and type(wrapped.environment) is FabricLightning
    assert as_cluster_environment(object()) is None
    slurm = {"SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "train", "SLURM_NTASKS": "4", "SLURM_PROCID": "3",
             "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NTASKS_PER_NODE": "2", "SLURM_NNODES": "2",
             "SLURM_JOB_NUM_NODES": "2", "SLURM_JOB_NODELIST": "node[07-08]"}  # fmt: skip
    for key, value in slurm.items():
        clean_env.setenv(key, value)
    env = FabricSLURM(auto_requeue=False)
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp", plugins=[env], logger=False)
    assert (trainer.world_size, trainer.global_rank, trainer.local_rank, trainer.node_rank) == (4, 3, 1, 1)
    assert trainer.config.cluster_environment.auto_requeue is False  # its own settings are read through
    with pytest.raises(ValueError, match="ntasks-per-node=2"):  # its own check of the flags, as in Lightning
        fulmen.Trainer(accelerator="cpu", devices=4, strategy="ddp", plugins=[FabricSLURM()], logger=False)


@oracle.parity
def test_fabric_lightning_environment_in_a_process_fulmen_started(clean_env):
    """In a local rank fulmen's launcher started, Lightning's LightningEnvironment is told the ranks, as
    Lightning's strategies tell it."""
    oracle.lightning()
    from lightning.fabric.plugins.environments import LightningEnvironment as FabricLightning
    from lightning.fabric.utilities.rank_zero import rank_zero_only

    clean_env.setattr(rank_zero_only, "rank", getattr(rank_zero_only, "rank", 0))  # set_global_rank changes it
    for key, value in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29501", "FULMEN_LAUNCHER": "fulmen"}.items():  # fmt: skip
        clean_env.setenv(key, value)
    env = FabricLightning()
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp", plugins=[env], logger=False)
    assert (trainer.world_size, trainer.global_rank) == (2, 1)
    assert (env.world_size(), env.global_rank()) == (2, 1)


@oracle.parity
def test_a_strategys_fabric_cluster_environment(clean_env):
    oracle.lightning()
    from lightning.fabric.plugins.environments import TorchElasticEnvironment as FabricElastic

    from fulmen.plugins.environments import TorchElasticEnvironment
    from fulmen.strategies import DDPStrategy

    for key, value in {"RANK": "2", "LOCAL_RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29502"}.items():  # fmt: skip
        clean_env.setenv(key, value)
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, num_nodes=2, strategy=DDPStrategy(cluster_environment=FabricElastic()),
                             logger=False)  # fmt: skip
    assert (trainer.world_size, trainer.global_rank, trainer.node_rank) == (4, 2, 1)
    with pytest.raises(MisconfigurationException, match="set both by DDPStrategy"):
        fulmen.Trainer(accelerator="cpu", devices=2, num_nodes=2, strategy=DDPStrategy(cluster_environment=FabricElastic()),
                       plugins=[TorchElasticEnvironment()], logger=False)  # fmt: skip


def test_an_environment_written_to_lightnings_interface(clean_env):
    """A fulmen ClusterEnvironment subclass that implements Lightning's methods instead of layout()."""

    class Scheduler(ClusterEnvironment):
        @property
        def creates_processes_externally(self) -> bool:
            return True

        @staticmethod
        def detect() -> bool:
            return True

        @property
        def main_address(self) -> str:
            return "head-node"

        @property
        def main_port(self) -> int:
            return 31000

        def world_size(self) -> int:
            return 6

        def global_rank(self) -> int:
            return 5

        def local_rank(self) -> int:
            return 2

        def node_rank(self) -> int:
            return 1

    trainer = fulmen.Trainer(accelerator="cpu", devices=3, num_nodes=2, strategy="ddp", plugins=[Scheduler()],
                             logger=False)  # fmt: skip
    assert (trainer.world_size, trainer.global_rank, trainer.local_rank, trainer.node_rank) == (6, 5, 2, 1)

    class Nothing(ClusterEnvironment):
        creates_processes_externally = True

        @staticmethod
        def detect() -> bool:
            return True

    with pytest.raises(NotImplementedError, match=r"implement layout\(\), or Lightning's world_size\(\)"):
        Nothing().layout()


@oracle.parity
@pytest.mark.slow
def test_a_ddp_fit_under_mpiexec(tmp_path):
    """Two processes started by mpiexec: both environments answer alike on each rank, and the DDP fit takes its
    ranks and rendezvous from MPI (mpi4py with an MPI library: skipped where they are not installed)."""
    import json
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("mpi4py.MPI")
    oracle.lightning()
    mpiexec = shutil.which("mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if mpiexec is None:
        pytest.skip("no mpiexec")
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARIABLES and not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(root), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = subprocess.run([mpiexec, "-n", "2", sys.executable, str(root / "tests" / "plugins" / "mpi_run.py"),
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        answers = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert answers["ours"] == answers["theirs"] and answers["ours"][:2] == [2, rank]
        assert answers["detected"] == answers["ours"][:4]
        assert answers["fit"] == {"world": 2, "rank": rank, "step": 2, "same_weights": True}


@oracle.parity
def test_lightning_environment_takes_the_strategys_plan_as_lightnings(clean_env):
    oracle.lightning()
    from lightning.fabric.utilities.rank_zero import rank_zero_only as their_rank_zero
    from lightning.pytorch.plugins.environments import LightningEnvironment as Theirs

    from fulmen.plugins.environments import LightningEnvironment
    from fulmen.utilities.rank_zero import rank_zero_only

    clean_env.setattr(rank_zero_only, "rank", getattr(rank_zero_only, "rank", 0))
    clean_env.setattr(their_rank_zero, "rank", getattr(their_rank_zero, "rank", 0))
    ours, theirs = LightningEnvironment(), Theirs()
    assert (ours.world_size(), ours.global_rank()) == (theirs.world_size(), theirs.global_rank()) == (1, 0)
    clean_env.setenv("LOCAL_RANK", "1")
    clean_env.setenv("NODE_RANK", "2")
    for env in (ours, theirs):
        env.set_world_size(8)
        env.set_global_rank(5)
    for method in ("world_size", "global_rank", "local_rank", "node_rank"):
        assert getattr(ours, method)() == getattr(theirs, method)(), method
    assert rank_zero_only.rank == 5  # rank-zero-only output follows the plan
    assert ours.detect() and Theirs.detect()


@oracle.parity
def test_a_fabric_environment_whose_launcher_did_not_start_the_process(clean_env):
    oracle.lightning()
    from lightning.fabric.plugins.environments import TorchElasticEnvironment as FabricElastic

    with pytest.raises(KeyError, match=r"plugins=\[TorchElasticEnvironment\(\)\]\): reading the ranks failed \('LOCAL_RANK'\)"):
        fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp", plugins=[FabricElastic()], logger=False)


@oracle.parity
def test_an_lsf_job_is_detected_without_the_plugin_as_in_lightning(clean_env, tmp_path):
    lightning = oracle.lightning()
    _lsf_job(clean_env, tmp_path, rank=3, local_rank=1, with_port=True)
    theirs = lightning.Trainer(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp", logger=False)
    assert type(theirs.strategy.cluster_environment).__name__ == "LSFEnvironment"
    ours = fulmen.Trainer(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp", logger=False)
    assert (ours.world_size, ours.global_rank, ours.local_rank, ours.node_rank) == (4, 3, 1, 1)
    assert (theirs.world_size, theirs.global_rank, theirs.local_rank, theirs.node_rank) == (4, 3, 1, 1)
    assert type(ours.strategy.cluster_environment).__name__ == "LSFEnvironment"


_LAUNCHES = {
    "fulmen starts them": {},
    "torchrun": {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29511", "TORCHELASTIC_RUN_ID": "x"},
    "slurm": {"SLURM_JOB_ID": "7", "SLURM_JOB_NAME": "train", "SLURM_NTASKS": "2", "SLURM_PROCID": "1",
              "SLURM_LOCALID": "1", "SLURM_NODEID": "0", "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_NUM_NODES": "1",
              "SLURM_JOB_NODELIST": "node07"},
}  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("launch", sorted(_LAUNCHES))
def test_the_strategys_cluster_environment_names_the_launcher_as_lightnings(clean_env, launch):
    """Code written against Lightning reads the launcher and the ranks from ``strategy.cluster_environment``:
    the plugin object of the launcher that started the process (or of none: fulmen's own)."""
    lightning = oracle.lightning()
    clean_env.delenv("TORCHELASTIC_RUN_ID", raising=False)
    for key, value in _LAUNCHES[launch].items():
        clean_env.setenv(key, value)
    ours = fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False).strategy.cluster_environment
    theirs = lightning.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False).strategy.cluster_environment
    assert type(ours).__name__ == type(theirs).__name__
    for method in ("world_size", "global_rank", "local_rank", "node_rank"):
        assert getattr(ours, method)() == getattr(theirs, method)(), method
    assert ours.creates_processes_externally == theirs.creates_processes_externally


@oracle.parity
def test_the_cluster_environment_given_is_the_one_reported_and_can_be_assigned(clean_env):
    """The object given (a Fabric one unwrapped) is reported as given; one assigned to a strategy no Trainer has
    set up gives its ranks, as Lightning's strategies read theirs; a one-device strategy has none."""
    lightning = oracle.lightning()
    from unittest.mock import Mock

    from lightning.fabric.plugins.environments import LightningEnvironment as FabricLightning

    given = FabricLightning()
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp", plugins=[given], logger=False)
    assert trainer.strategy.cluster_environment is given
    assert trainer._accelerator_connector.cluster_environment is given
    for strategy in (fulmen.strategies.DDPStrategy(), lightning.strategies.DDPStrategy()):
        assert strategy.cluster_environment is None
        strategy.cluster_environment = Mock(world_size=Mock(return_value=4), global_rank=Mock(return_value=3),
                                            local_rank=Mock(return_value=1), node_rank=Mock(return_value=1))  # fmt: skip
        assert (strategy.world_size, strategy.global_rank, strategy.local_rank, strategy.node_rank) == (4, 3, 1, 1)
    for module in (fulmen, lightning):
        single = module.Trainer(accelerator="cpu", devices=1, logger=False).strategy
        assert not hasattr(single, "cluster_environment"), type(single).__name__

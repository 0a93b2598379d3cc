"""Cluster-environment plugins: the launcher they name is the one read (SLURM, torchrun, or fulmen's own), and
SLURMEnvironment decides the requeue signal and whether the job is requeued."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import fulmen
from fulmen.plugins import LightningEnvironment, SLURMEnvironment, TorchElasticEnvironment
from fulmen.utilities.exceptions import MisconfigurationException

ROOT = Path(__file__).resolve().parents[2]
_LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                     "MASTER_PORT", "FULMEN_LAUNCHER")  # fmt: skip


@pytest.fixture
def clean_env(monkeypatch):
    for key in [k for k in os.environ if k.startswith("SLURM_")] + list(_LAUNCH_VARIABLES):
        monkeypatch.delenv(key, raising=False)
    return monkeypatch


def _slurm_task(monkeypatch, rank: int) -> None:
    for key, value in {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_NTASKS": "2", "SLURM_PROCID": str(rank),
                       "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0", "SLURM_NTASKS_PER_NODE": "2",
                       "SLURM_JOB_NUM_NODES": "1", "SLURM_JOB_NODELIST": "node[07-08]"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)


def _trainer(plugin, devices=2):
    return fulmen.Trainer(accelerator="cpu", devices=devices, strategy="ddp", plugins=[plugin], logger=False)


def test_slurm_environment_gives_the_ranks(clean_env):
    _slurm_task(clean_env, rank=1)
    env = SLURMEnvironment()
    assert env.detect() and env.creates_processes_externally and env.job_id() == SLURMEnvironment.job_id() == 4242
    assert (env.world_size(), env.global_rank(), env.local_rank(), env.main_address) == (2, 1, 1, "node07")
    trainer = _trainer(env)
    assert (trainer.world_size, trainer.global_rank, trainer.strategy.cluster_layout.launcher) == (2, 1, "slurm")
    assert trainer.config.cluster_environment is env


def test_the_named_launcher_wins_over_the_detected_one(clean_env):
    _slurm_task(clean_env, rank=1)
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29555"}.items():  # fmt: skip
        clean_env.setenv(key, value)
    assert fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False).global_rank == 0  # torchrun first
    assert _trainer(SLURMEnvironment()).global_rank == 1  # named: SLURM's ranks
    assert _trainer(TorchElasticEnvironment()).global_rank == 0


def test_lightning_environment_ignores_an_allocation_and_launches_itself(clean_env):
    _slurm_task(clean_env, rank=1)
    env = LightningEnvironment()
    trainer = _trainer(env)
    assert trainer.world_size == 2 and trainer.global_rank == 0 and trainer.strategy.cluster_layout is None
    assert trainer.strategy.cluster_environment is env


def test_a_named_launcher_that_did_not_start_the_process_is_refused(clean_env):
    with pytest.raises(MisconfigurationException, match=r"TorchElasticEnvironment\(\)\]\): this process was not"):
        _trainer(TorchElasticEnvironment())
    with pytest.raises(MisconfigurationException, match="two cluster environment plugins"):
        fulmen.Trainer(plugins=[SLURMEnvironment(), LightningEnvironment()])


def _fake_scontrol(folder: Path) -> Path:
    script = folder / "scontrol"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {folder / 'scontrol.log'}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return folder / "scontrol.log"


@pytest.mark.slow
@pytest.mark.parametrize(("args", "requeued"), [(["SIGUSR1"], True), (["SIGUSR2", "false"], False),
                                                (["SIGUSR2", "true"], True)])  # fmt: skip
def test_requeue_signal_and_auto_requeue(tmp_path, args, requeued):
    log = _fake_scontrol(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in _LAUNCH_VARIABLES}
    env.update(SLURM_JOB_ID="77", SLURM_JOB_NAME="train", SLURM_NTASKS="1", SLURM_PROCID="0",
               PATH=f"{tmp_path}{os.pathsep}{env['PATH']}", PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")  # fmt: skip
    script = ROOT / "tests" / "plugins" / "slurm_signal_run.py"
    done = subprocess.run([sys.executable, str(script), str(tmp_path), *args], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "fit returned" not in done.stdout
    assert list((tmp_path / "checkpoints").glob("*.ckpt")), "a checkpoint was saved before stopping"
    assert (log.exists() and log.read_text().split()) == (["requeue", "77"] if requeued else False)


@pytest.mark.slow
def test_a_requeue_signal_whose_checkpoint_fails_still_requeues_and_ends_with_the_error(tmp_path):
    """The job goes back in the queue (it resumes from the last checkpoint that was written), and the process
    ends with the failed save's error instead of the clean exit of a saved run."""
    log = _fake_scontrol(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in _LAUNCH_VARIABLES}
    env.update(SLURM_JOB_ID="78", SLURM_JOB_NAME="train", SLURM_NTASKS="1", SLURM_PROCID="0", TEST_FAILING_SAVES="1",
               PATH=f"{tmp_path}{os.pathsep}{env['PATH']}", PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")  # fmt: skip
    script = ROOT / "tests" / "plugins" / "slurm_signal_run.py"
    done = subprocess.run([sys.executable, str(script), str(tmp_path), "SIGUSR1"], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    assert "fit returned" not in done.stdout
    assert "An asynchronous checkpoint save failed" in done.stderr and "No space left on device" in done.stderr
    assert log.read_text().split() == ["requeue", "78"]


@pytest.mark.parametrize(("job", "requeued"), [("4711", "4711"), ("4711; rm -rf", None), ("--help", None)])
def test_the_requeue_command_gets_only_a_job_id(clean_env, tmp_path, job, requeued):
    """What reaches ``scontrol`` is a job id (digits, ``_``, ``-``), never text it could read as an option; a
    malformed id warns (the checkpoint is saved already) instead of raising inside the signal handling."""
    from unittest import mock

    from fulmen.trainer.connectors.signal_connector import _SignalConnector

    clean_env.setenv("SLURM_JOB_ID", job)
    trainer = fulmen.Trainer(plugins=[SLURMEnvironment()], default_root_dir=tmp_path, logger=False)
    with mock.patch("fulmen.trainer.connectors.signal_connector.call", return_value=0) as call, \
            mock.patch.object(fulmen.Trainer, "save_checkpoint"):  # fmt: skip
        if requeued is None:
            with pytest.warns(UserWarning, match="is not a job id"):
                _SignalConnector(trainer)._slurm_sigusr_handler_fn(None, None)
            call.assert_not_called()
        else:
            _SignalConnector(trainer)._slurm_sigusr_handler_fn(None, None)
            call.assert_called_once_with(["scontrol", "requeue", requeued])

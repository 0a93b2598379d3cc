"""DDP on CPU with gloo, two processes started by torchrun: the same training as one process on the
global batch (DistributedSampler shares, gradients averaged in backward, no_sync while accumulating,
sync_dist logging)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fulmen
from tests import gloo, prefetch
from tests.parity import oracle
from tests.strategies.ddp_model import CASES, GAN, Model, gan_loader, loader

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _free_ports(count: int) -> list[int]:
    """``count`` different free ports (held open together while chosen, so none is given twice)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _free_port_in(low: int, high: int) -> int:
    for port in range(low + os.getpid() % 1000, high):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {low}..{high}")


@pytest.fixture(scope="module")
def ddp_results():
    """The script's results on both ranks, every scenario, started by torchrun (2 processes, gloo)."""
    return prefetch.result("ddp-torchrun")


@pytest.fixture(scope="module", params=["torchrun", "fulmen", "torchrun, two nodes", "slurm"])
def launched(request, ddp_results):
    """The training cases started each way a job starts: by torchrun; as a plain script that fulmen's own
    launcher (Trainer(strategy="ddp", devices=2) outside a launcher) starts again for rank 1; as a simulated
    two-machine job, two `torchrun --nnodes=2 --node_rank=0|1` launches on 127.0.0.1 with one process each;
    or as two tasks of a simulated SLURM job (srun's environment variables, no torchrun variables). Only the
    cases run for the other ways: what they change is how the processes find each other."""
    return ddp_results if request.param == "torchrun" else prefetch.result(f"ddp-{request.param}")


def _launch(out: Path, environ: dict[str, str], mode: str, only_cases: bool = False) -> list[dict]:
    script = str(ROOT / "tests" / "strategies" / "ddp_script.py")
    env = dict(environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    if only_cases:
        env["TEST_ONLY_CASES"] = "1"
    for key in [k for k in env if k.startswith("SLURM_")] + ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                                              "MASTER_ADDR", "MASTER_PORT"]:  # fmt: skip
        env.pop(key, None)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--master_addr=127.0.0.1",
                f"--master_port={_free_port()}"]  # fmt: skip
    if mode == "torchrun":
        commands = [[*torchrun, "--nproc_per_node=2", script, str(out)]]
    elif mode == "fulmen":
        commands = [[sys.executable, script, str(out)]]
    elif mode == "slurm":  # what srun --ntasks-per-node=2 sets; the port comes from the job id
        port = _free_port_in(20000, 40000)
        env.update(SLURM_JOB_ID=str(port - 20000), SLURM_JOB_NAME="ddp", SLURM_NTASKS="2", SLURM_NODEID="0",
                   SLURM_NTASKS_PER_NODE="2", SLURM_JOB_NUM_NODES="1", SLURM_JOB_NODELIST="127.0.0.1")  # fmt: skip
        commands = [[sys.executable, script, str(out)] for _ in range(2)]
        envs = [dict(env, SLURM_PROCID=str(rank), SLURM_LOCALID=str(rank)) for rank in range(2)]
    else:
        env.update(TEST_DEVICES="1", TEST_NUM_NODES="2")
        commands = [[*torchrun, "--nnodes=2", f"--node_rank={node}", "--nproc_per_node=1", script, str(out)]
                    for node in (0, 1)]  # fmt: skip
    envs = envs if mode == "slurm" else [env] * len(commands)
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e, cwd=out)
             for c, e in zip(commands, envs)]  # fmt: skip
    for proc in procs:
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, output[-4000:]
    results = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]
    launcher = {"fulmen": "fulmen", "slurm": "slurm"}.get(mode, "torchrun")
    assert all(
        r[case]["launcher"] == launcher for r in results for case in CASES
    )  # whose variables were read
    return results


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_two_processes_train_like_one_on_the_global_batch(launched, case):
    single = Model()
    trainer = fulmen.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, **CASES[case])  # fmt: skip
    trainer.fit(single, loader(batch_size=8))
    for rank in (0, 1):
        result = launched[rank][case]
        assert result["strategy"] == "DDPStrategy" and result["world_size"] == 2
        assert result["node_rank"] == (rank if result["num_nodes"] == 2 else 0)
        assert result["samples"] == 64  # half of the 64 samples per epoch, for two epochs
        assert result["global_step"] == trainer.global_step
        # accumulating batches keep gradients local: 4 of the 8 batches per epoch, two epochs
        assert result["no_sync_batches"] == (8 if case == "accumulate" else 0)
        assert result["reductions"] == trainer.global_step  # one all-reduce per optimizer step, none between
        for name, value in single.state_dict().items():
            torch.testing.assert_close(result["weights"][name], value, rtol=0, atol=1e-6, msg=name)
        # sync_dist: every rank reports the global epoch mean, the one process's mean
        assert result["loss_epoch"] == pytest.approx(float(trainer.callback_metrics["loss_epoch"]), abs=1e-6)


def _launch_lightning(out: Path, environ: dict[str, str]) -> list[dict]:
    oracle.lightning()
    script = str(ROOT / "tests" / "strategies" / "ddp_lightning_script.py")
    env = {k: v for k, v in environ.items() if not k.startswith("SLURM_")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    command = [sys.executable, "-m", "torch.distributed.run", "--master_addr=127.0.0.1",
               f"--master_port={_free_port()}", "--nproc_per_node=2", script, str(out)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=out, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [torch.load(out / f"lightning_rank{r}.pt", weights_only=False) for r in range(2)]


# started in the background when these tests are selected (tests/prefetch.py), in the order the tests use them
prefetch.register("ddp-torchrun", __name__, lambda out, environ: _launch(out, environ, "torchrun"))
prefetch.register("ddp-lightning", __name__, _launch_lightning)
for _mode in ("fulmen", "torchrun, two nodes", "slurm"):
    prefetch.register(f"ddp-{_mode}", __name__,
                      lambda out, environ, mode=_mode: _launch(out, environ, mode, only_cases=True))  # fmt: skip


@pytest.fixture(scope="module")
def lightning_ddp():
    """The same cases trained by Lightning's DDP (2 processes under torchrun, gloo): the oracle."""
    return prefetch.result("ddp-lightning")


@oracle.parity
@pytest.mark.slow
def test_same_weights_as_lightning_ddp(ddp_results, lightning_ddp):
    for rank in (0, 1):
        for case in [*CASES, "gan", "shuffled", "seeded"]:
            ours = ddp_results[rank][case]["weights"]
            theirs = lightning_ddp[rank][case]
            assert not isinstance(theirs, str), theirs
            for name, value in theirs.items():
                torch.testing.assert_close(ours[name], value, rtol=0, atol=1e-6, msg=f"{case}: {name}")


@pytest.mark.slow
def test_checkpoint_and_resume_under_ddp(ddp_results):
    """Checkpoints written once (rank 0) mid-epoch, loaded by both ranks: the resumed run ends where the
    uninterrupted one did."""
    for rank in (0, 1):
        resumed, full = ddp_results[rank]["resumed"], ddp_results[rank]["plain"]
        assert resumed["global_step"] == full["global_step"] == 16
        for name, value in full["weights"].items():
            torch.testing.assert_close(resumed["weights"][name], value, rtol=0, atol=0, msg=name)


@pytest.mark.slow
def test_seed_gan_with_toggle_model_under_ddp(ddp_results):
    """Seed 001's GAN: manual optimization with two optimizers, accumulating over two batches with
    toggle_model(sync_grad=False). Both processes end with the weights of one process on the global batch,
    and gradients are all-reduced only on the batches that step (once per optimizer)."""
    single = GAN()
    trainer = fulmen.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False)  # fmt: skip
    trainer.fit(single, gan_loader(batch_size=8))
    assert trainer.global_step == 12  # 3 stepping batches x 2 optimizers x 2 epochs
    for rank in (0, 1):
        result = ddp_results[rank]["gan"]
        assert result["global_step"] == 12
        assert result["no_sync_blocks"] == 12  # 3 accumulating batches x 2 toggles x 2 epochs
        assert result["reductions"] == 12  # nothing reduced while accumulating
        for name, value in single.state_dict().items():
            torch.testing.assert_close(result["weights"][name], value, rtol=0, atol=1e-6, msg=name)


@pytest.mark.slow
def test_stop_decisions_are_agreed_between_ranks(ddp_results):
    """A should_stop set by one rank mid-epoch stops every rank at that epoch's end (no collective per batch);
    an EarlyStopping that only one rank's metric triggers stops both at the same epoch."""
    for rank in (0, 1):
        assert ddp_results[rank]["local_stop"] == {"global_step": 8, "current_epoch": 1, "should_stop": True}
        assert ddp_results[rank]["early_stopping"] == {
            "global_step": 16,
            "current_epoch": 2,
            "should_stop": True,
        }


@pytest.mark.slow
def test_only_rank_zero_logs_prints_and_saves(ddp_results, tmp_path_factory):
    """Loggers write, the progress bar and model summary show, trainer.print prints and save_checkpoint writes
    on global rank 0 only; the other rank is silent."""
    first, second = (ddp_results[rank]["rank_zero"] for rank in (0, 1))
    for text in ("Trainable params", "Epoch 1: 100%", "hello from trainer.print"):  # summary, bar, print
        assert text in first["stdout"]
    assert second["stdout"] == "" and "Epoch" not in second["stderr"], second
    out = Path(ddp_results[0]["outdir"])
    assert (out / "manual_rank0.ckpt").is_file() and not (out / "manual_rank1.ckpt").exists()
    events = list((out / "tb" / "lightning_logs" / "version_0").glob("events.out.tfevents.*"))
    assert events and all(f".{first['pid']}." in e.name for e in events)  # written by rank 0's process
    rows = (out / "logs" / "lightning_logs" / "version_0" / "metrics.csv").read_text().splitlines()
    # one row per logging step (every 2nd of 16) and per epoch end, once: nothing written twice
    assert len(rows) == 1 + 8 + 2, rows
    from mlflow.tracking import MlflowClient

    from tests.loggers.wandb_records import read_run

    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    (experiment,) = [e for e in client.search_experiments() if e.name == "ddp"]
    (run,) = client.search_runs([experiment.experiment_id])  # one run: rank 1 made none
    assert run.info.run_id == first["mlflow_run"] and second["mlflow_run"] is None
    assert len(client.get_metric_history(run.info.run_id, "loss_step")) == 8
    wandb_run = read_run(str(out / "wb"))  # exactly one offline run folder
    assert wandb_run["id"] == first["wandb_run"] and second["wandb_run"] is None
    assert len([row for row in wandb_run["history"] if "loss_step" in row]) == 8


@pytest.mark.slow
def test_batch_size_finder_agrees_between_ranks(ddp_results):
    for rank in (0, 1):
        result = ddp_results[rank]["batch_size"]
        assert result["size"] == result["attribute"] == 16 and result["weights_restored"]
        assert result["tried"] == [2, 4, 8, 16, 32]  # 32 fits rank 0 alone: not enough


@pytest.mark.slow
def test_learning_rate_finder_agrees_between_ranks(ddp_results):
    assert ddp_results[0]["lr_find"] == ddp_results[1]["lr_find"] != 0.3


@pytest.mark.slow
def test_collectives(ddp_results):
    for rank in (0, 1):
        assert ddp_results[rank]["collectives"] == {
            "broadcast": {"from": 0}, "all_gather": [[1.0], [2.0]], "mean": [1.5], "sum": [3.0], "max": [2.0],
            "any": True, "all": False,
        }  # fmt: skip


@pytest.mark.slow
def test_module_all_gather_and_prediction_writer(ddp_results):
    for rank in (0, 1):
        # each rank's loss is 1*x_0 + 3*x_1 over the gathered x; rank r's gradient sums d(loss)/d(x_r) over
        # both ranks' losses: 1 + 1 on rank 0, 3 + 3 on rank 1
        assert ddp_results[rank]["module_all_gather"] == {
            "rank": [[0.0], [1.0]], "number": [10, 11], "grad": [[2.0], [6.0]][rank],
        }  # fmt: skip
    seen = []
    for rank in (0, 1):
        written = ddp_results[rank]["prediction_writer"]
        assert written["returned"] is None
        batches = written["batches"]
        assert written["epoch"] == (len(batches), [[indices for indices, _ in batches]])
        assert all(len(indices) == size for indices, size in batches)
        seen += [i for indices, _ in batches for i in indices]
    # prediction shares without padding (Lightning's UnrepeatedDistributedSampler): rank r gets r, r+2, ...,
    # together the ranks cover all 63 once each (a padded DistributedSampler would predict sample 0 twice)
    assert sorted(seen) == list(range(63))
    assert [len(ddp_results[rank]["prediction_writer"]["batches"]) for rank in (0, 1)] == [7, 7]
    assert all(i % 2 == 0 for indices, _ in ddp_results[0]["prediction_writer"]["batches"] for i in indices)


def test_launch_checks(monkeypatch):
    from fulmen.strategies.ddp import DDPStrategy
    from fulmen.strategies.parallel import launch_local_ranks
    from fulmen.utilities.exceptions import MisconfigurationException

    _clear_launcher_env(monkeypatch)
    planned = fulmen.Trainer(accelerator="cpu", devices=2, logger=False)  # fulmen starts rank 1 at fit()
    assert isinstance(planned.strategy, DDPStrategy) and planned.world_size == 2 and planned.is_global_zero
    with pytest.raises(MisconfigurationException, match="not started from a script"):
        launch_local_ranks(2)  # under a test runner there is no script to start again
    with pytest.raises(MisconfigurationException, match="torchrun --nnodes=2"):
        fulmen.Trainer(accelerator="cpu", devices=2, num_nodes=2, logger=False)
    single = fulmen.Trainer(accelerator="cpu", devices=1, strategy="ddp", logger=False)
    assert type(single.strategy).__name__ == "SingleDeviceStrategy"  # one process needs no group

    for key, value in {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(MisconfigurationException, match="torchrun started 4 with 2 per node") as refused:
        fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp", logger=False)
    assert isinstance(refused.value, ValueError)  # Lightning's class for a launch that disagrees with the flags
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, num_nodes=2, strategy="ddp", logger=False)
    assert isinstance(trainer.strategy, DDPStrategy)
    assert (trainer.world_size, trainer.global_rank, trainer.local_rank, trainer.node_rank) == (4, 3, 1, 1)
    assert not trainer.is_global_zero
    custom = fulmen.Trainer(accelerator="cpu", devices=2, num_nodes=2, logger=False,
                            strategy=DDPStrategy(find_unused_parameters=True, static_graph=False))  # fmt: skip
    assert custom.strategy._ddp_kwargs["find_unused_parameters"] is True


def _killed_rank_job(out: Path, launcher: str, killed: int, port: int) -> subprocess.Popen[str]:
    script = str(ROOT / "tests" / "strategies" / "ddp_script.py")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in ("RANK", "WORLD_SIZE")
    }
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", TEST_KILL_RANK=str(killed))
    if launcher == "torchrun":
        command = [sys.executable, "-m", "torch.distributed.run", "--master_addr=127.0.0.1",
                   f"--master_port={port}", "--nproc_per_node=2", script, str(out)]  # fmt: skip
    else:  # a port of its own (the job beside it starts at the same moment: no two may pick the same free one)
        env["MASTER_PORT"] = str(port)
        command = [sys.executable, script, str(out)]
    out.mkdir()
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=out, start_new_session=True)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torchrun", "fulmen"])
def test_a_killed_rank_ends_the_job(tmp_path, launcher):
    """SIGKILL one rank mid-training: every process exits (no hang until the 30-minute process-group timeout),
    the output names the rank, and the checkpoints written before remain loadable. Rank 0 killed in one job,
    rank 1 in another, at the same time."""
    from fulmen.checkpoint import files as checkpoint_io

    ports = _free_ports(2)
    jobs = {killed: _killed_rank_job(tmp_path / f"killed{killed}", launcher, killed, ports[killed]) for killed in (0, 1)}
    outputs = {}
    try:
        for killed, proc in jobs.items():
            outputs[killed], _ = proc.communicate(timeout=120)
    finally:
        for proc in jobs.values():
            os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
    for killed, proc in jobs.items():
        output = outputs[killed]
        assert proc.returncode != 0, output[-3000:]
        survivor = 1 - killed
        if launcher == "torchrun":  # torchrun's report names the rank that died
            assert f"rank      : {killed} (local_rank: {killed})" in output and "Signal 9 (SIGKILL)" in output, (
                output
            )
        elif killed == 1:  # rank 0 started rank 1 and says what became of it
            assert "rank 1 (pid" in output and "was killed by SIGKILL" in output, output[-3000:]
        assert f"fulmen: rank {survivor} of 2" in output, output[-3000:]  # the survivor names itself
        # no process of the job is left running (the session holds them all)
        listing = subprocess.run(
            ["ps", "-o", "stat=,pid=,args=", "-s", str(proc.pid)], capture_output=True, text=True
        )
        alive = [line for line in listing.stdout.splitlines() if not line.startswith("Z")]  # zombies have ended
        assert alive == [], alive
        written = sorted((tmp_path / f"killed{killed}" / "ckpt").glob("*.ckpt"))
        assert [p.name for p in written] == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"]
        for path in written:
            assert checkpoint_io.load(path, map_location="cpu", weights_only=True)["global_step"] in (2, 4)


FAILS_BEFORE_RENDEZVOUS = """
import os
import fulmen
from fulmen.demos.boring_classes import BoringModel

if __name__ == "__main__":
    if os.environ.get("LOCAL_RANK") == "1":
        raise SystemExit("rank 1: a mistake before the Trainer is made")
    fulmen.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_steps=1, logger=False).fit(BoringModel())
"""


@pytest.mark.slow
def test_a_rank_failing_before_the_rendezvous_ends_the_job_at_once(tmp_path):
    """Rank 0 waits in the process-group rendezvous for the ranks it started: when one of them ends first, rank
    0 says which and ends the job, instead of waiting for the rendezvous timeout (30 minutes)."""
    script = tmp_path / "script.py"
    script.write_text(FAILS_BEFORE_RENDEZVOUS)
    launch = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in launch}
    env.update(PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "rank 1: a mistake before the Trainer is made" in done.stderr
    assert "fulmen: rank 1 (pid" in done.stderr and "exited with code 1 before joining the process group" in done.stderr


@pytest.mark.slow
def test_torchrun_elastic_restart_resumes_from_the_last_checkpoint(tmp_path):
    """torchrun --max-restarts=1: rank 1 is killed in the first attempt, torchrun restarts both ranks, which
    resume from last.ckpt (ckpt_path="last") and end as an uninterrupted run (one process, global batch)."""
    script = str(ROOT / "tests" / "strategies" / "ddp_script.py")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in ("RANK", "WORLD_SIZE")
    }
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", TEST_ELASTIC="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--master_addr=127.0.0.1", f"--master_port={_free_port()}",
               "--nproc_per_node=2", "--max-restarts=1", script, str(tmp_path)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    single = Model()
    fulmen.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False).fit(single, loader(batch_size=8))  # fmt: skip
    for rank in (0, 1):
        result = torch.load(tmp_path / f"elastic_rank{rank}.pt", weights_only=False)
        assert result["attempt"] == 1 and result["global_step"] == 16
        assert result["resumed_from"] == str(tmp_path / "ckpt" / "last.ckpt")
        for name, value in single.state_dict().items():
            torch.testing.assert_close(result["weights"][name], value, rtol=0, atol=1e-6, msg=name)


@pytest.mark.slow
def test_processes_exit_cleanly_right_after_collectives():
    """The interpreter may begin to shut down while gloo's worker threads still release the last collective's
    tensors, which takes the GIL: before fulmen waited for them at exit, about one run in four aborted here
    (SIGABRT, "terminate called without an active exception") after training had succeeded."""
    for returncode, stderr in prefetch.result("ddp-exit"):
        assert returncode == 0, stderr[-3000:]


def _exit_launches(folder: Path, environ: dict[str, str]) -> list[tuple[int, str]]:
    """Two torchrun launches at the same time, in directories of their own (the FSDP tests' torchrun launches
    must exit cleanly too: the same exit path): their exit statuses and error output."""
    script = str(ROOT / "tests" / "strategies" / "ddp_script.py")
    env = {k: v for k, v in environ.items() if not k.startswith("SLURM_") and k not in ("RANK", "WORLD_SIZE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore", TEST_EXIT="1")
    jobs = []
    for n in range(2):
        out = folder / f"launch{n}"
        out.mkdir()
        command = [sys.executable, "-m", "torch.distributed.run", "--master_addr=127.0.0.1",
                   f"--master_port={_free_port()}", "--nproc_per_node=2", script, str(out)]  # fmt: skip
        jobs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     cwd=out))  # fmt: skip
    try:
        errors = [job.communicate(timeout=120)[1] for job in jobs]
        return [(job.returncode, error) for job, error in zip(jobs, errors)]
    finally:
        for job in jobs:
            job.kill() if job.poll() is None else None


prefetch.register("ddp-exit", __name__, _exit_launches)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names and states from Linux's /proc")
def test_exit_waits_for_busy_collective_threads():
    """_wait_until_idle returns once the named threads sleep, not while one still runs."""
    import ctypes
    import threading
    import time

    from fulmen.strategies.parallel import _wait_until_idle

    libc = ctypes.CDLL(None)
    busy_until = time.monotonic() + 0.3
    started = threading.Event()

    def worker() -> None:
        libc.prctl(15, b"fulmen_test_wk", 0, 0, 0)  # PR_SET_NAME: the name /proc shows for this thread
        started.set()
        while time.monotonic() < busy_until:  # running (state R) ...
            pass
        time.sleep(1.0)  # ... then asleep (state S)

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    started.wait()
    _wait_until_idle("fulmen_test_wk", timeout=5.0)
    assert time.monotonic() >= busy_until
    thread.join()


def _clear_launcher_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("SLURM_") or key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                                               "MASTER_ADDR", "MASTER_PORT"):  # fmt: skip
            monkeypatch.delenv(key)


def test_slurm_environment_is_read(monkeypatch):
    """srun's variables give the ranks and the rendezvous (first host of the node list, a port from the job
    id); a mismatch with devices x num_nodes names the #SBATCH line that fixes it."""
    from fulmen.strategies.ddp import DDPStrategy
    from fulmen.utilities.cluster_layout import detect, first_host
    from fulmen.utilities.exceptions import MisconfigurationException

    assert first_host("gpu[03-05,9],cpu1") == "gpu03"
    assert first_host("node7,node8") == "node7"
    assert first_host("a-b-1") == "a-b-1"
    _clear_launcher_env(monkeypatch)
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_NTASKS": "4", "SLURM_PROCID": "3",
             "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_NTASKS_PER_NODE": "2(x2)", "SLURM_JOB_NUM_NODES": "2",
             "SLURM_JOB_NODELIST": "gpu[03-04]"}  # fmt: skip
    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    cluster = detect()
    assert cluster is not None and cluster.launcher == "slurm"
    assert (cluster.world_size, cluster.global_rank, cluster.local_rank, cluster.node_rank) == (4, 3, 1, 1)
    assert (cluster.master_addr, cluster.num_nodes) == ("gpu03", 2)
    assert cluster.master_port == 20000 + 4242 % 20000
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, num_nodes=2, logger=False)  # 'auto' → DDP
    assert isinstance(trainer.strategy, DDPStrategy)
    assert (trainer.world_size, trainer.global_rank, trainer.node_rank, trainer.is_global_zero) == (
        4,
        3,
        1,
        False,
    )
    with pytest.raises(MisconfigurationException, match="#SBATCH --nodes=1 --ntasks-per-node=4"):
        fulmen.Trainer(accelerator="cpu", devices=4, strategy="ddp", logger=False)
    monkeypatch.setenv("SLURM_JOB_NAME", "bash")  # an salloc shell: nothing was launched
    assert detect() is None
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    monkeypatch.setenv("SLURM_NTASKS", "1")  # one task: fulmen may start the other local ranks itself
    assert detect() is None


def test_a_failing_rank_says_which_it_is_and_what_to_do(capsys, monkeypatch):
    from fulmen.strategies.ddp import DDPStrategy
    from fulmen.utilities.cluster_layout import detect

    _clear_launcher_env(monkeypatch)
    for key, value in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    strategy = DDPStrategy()
    strategy.check_launch([torch.device("cpu")] * 2, 1, detect())
    error = RuntimeError("Expected to have finished reduction ... pass find_unused_parameters=True to DDP")
    strategy.on_exception(error)
    printed = capsys.readouterr().err
    assert "fulmen: rank 1 of 2 (node 0, local rank 1) failed with RuntimeError" in printed
    assert "strategy='ddp_find_unused_parameters_true'" in printed
    if sys.version_info >= (3, 11):
        assert "raised on rank 1 of 2" in error.__notes__[0]


def test_sync_batchnorm(monkeypatch):
    """Trainer(sync_batchnorm=True): BatchNorm layers become SyncBatchNorm before DDP wraps the module (a
    one-process gloo group; the run itself needs GPUs); refused on CPUs, where torch cannot run SyncBatchNorm;
    a no-op warning with one process."""
    from fulmen.accelerators import CPUAccelerator
    from fulmen.strategies.ddp import DDPStrategy
    from fulmen.utilities.cluster_layout import detect
    from fulmen.utilities.exceptions import MisconfigurationException

    _clear_launcher_env(monkeypatch)
    with pytest.raises(MisconfigurationException, match="GPUs only"):
        fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp", sync_batchnorm=True, logger=False)
    with pytest.warns(UserWarning, match="no effect with one process"):
        fulmen.Trainer(accelerator="cpu", devices=1, sync_batchnorm=True, logger=False)

    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(_free_port())}  # fmt: skip
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    model = Model()
    model.net.insert(1, torch.nn.BatchNorm1d(16))
    strategy = DDPStrategy(accelerator=CPUAccelerator())
    strategy.check_launch([torch.device("cpu")], 1, detect())
    strategy.setup_environment()
    try:
        strategy.connect(model)
        # DDP itself refuses SyncBatchNorm on CPU modules: its error shows it was handed the converted layers
        with pytest.raises(ValueError, match="SyncBatchNorm layers only work with GPU modules"):
            strategy.connect_run(None, sync_batchnorm=True)
            strategy.setup()
        assert type(model.net[1]) is torch.nn.SyncBatchNorm
    finally:
        gloo.destroy_process_group()

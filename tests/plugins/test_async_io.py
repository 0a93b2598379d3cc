"""AsyncCheckpointIO: one save in flight, host buffers reused, a consistent snapshot, errors at the next step,
sharded FSDP checkpoints in the background, and files that survive a SIGKILL at any moment of a write."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch

from fulmen import Trainer
from fulmen.checkpoint import sharded as distributed_checkpoint
from fulmen.plugins import AsyncCheckpointIO, CheckpointIO, TorchCheckpointIO
from tests.plugins.async_kill_run import STEPS

ROOT = Path(__file__).resolve().parents[2]


class Slow(TorchCheckpointIO):
    """The real writer, slowed down; notes what it wrote and which tensor object it was given (a weak
    reference: a writer must not keep the tensors, the next save reuses them)."""

    def __init__(self, delay: float = 0.1, fail: bool = False) -> None:
        self.delay, self.fail = delay, fail
        self.saved: list[str] = []
        self.given: list[weakref.ref[torch.Tensor]] = []

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        if "w" in checkpoint["state_dict"]:
            self.given.append(weakref.ref(checkpoint["state_dict"]["w"]))
        time.sleep(self.delay)
        if self.fail:
            raise OSError(28, "No space left on device")
        super().save_checkpoint(checkpoint, path, storage_options)
        self.saved.append(os.path.basename(path))


def test_a_save_waits_for_the_one_in_flight_and_each_file_holds_its_own_state(tmp_path):
    inner = Slow(delay=0.1)
    io = AsyncCheckpointIO(inner)
    weights = {"w": torch.ones(1000)}
    io.save_checkpoint({"state_dict": weights}, tmp_path / "a.ckpt")
    weights["w"].fill_(2)
    io.save_checkpoint({"state_dict": weights}, tmp_path / "b.ckpt")
    assert inner.saved == ["a.ckpt"], "the second save returned before the first was written"
    weights["w"].fill_(3)
    io.teardown()
    assert inner.saved == ["a.ckpt", "b.ckpt"]
    # the second snapshot went into the first one's buffer only once that was written
    assert torch.equal(torch.load(tmp_path / "a.ckpt", weights_only=True)["state_dict"]["w"], torch.ones(1000))
    assert torch.equal(torch.load(tmp_path / "b.ckpt", weights_only=True)["state_dict"]["w"], torch.full((1000,), 2.0))


def test_host_buffers_are_kept_and_reused_for_the_same_shapes(tmp_path):
    inner = Slow(delay=0.0)
    io = AsyncCheckpointIO(inner)
    weights = {"w": torch.randn(1000)}
    io.save_checkpoint({"state_dict": weights}, tmp_path / "a.ckpt")
    weights["w"].mul_(2)
    io.save_checkpoint({"state_dict": weights}, tmp_path / "b.ckpt")
    io.wait()
    first = inner.given[0]()
    assert first is not None and first is inner.given[1](), "the second save copied into a new buffer"
    assert torch.equal(first, weights["w"]) and not first.requires_grad
    del first
    io.save_checkpoint({"state_dict": {"w": torch.randn(10)}}, tmp_path / "c.ckpt")  # another shape
    io.wait()
    assert inner.given[0]() is None, "a buffer of a shape the checkpoints no longer have is kept"
    assert inner.given[2]() is not None
    io.teardown()
    assert inner.given[2]() is None, "the buffers outlive the run"
    assert torch.equal(torch.load(tmp_path / "b.ckpt", weights_only=True)["state_dict"]["w"], weights["w"])


def test_the_written_checkpoint_is_the_state_when_save_returned(tmp_path):
    """Tensors changed in place, and every container or value the trainer changes after the call: the file
    holds what the checkpoint held when ``save_checkpoint`` returned."""
    io = AsyncCheckpointIO(Slow(delay=0.2))
    shared = torch.ones(3)
    checkpoint = {
        "state_dict": {"w": torch.zeros(4), "tied": shared, "also_tied": shared},
        "loops": {"progress": {"batches": [1, 2]}, "positions": np.arange(3)},
        "callbacks": {"Stop": {"wait": 1, "seen": {1, 2}}},
    }
    io.save_checkpoint(checkpoint, tmp_path / "a.ckpt")
    checkpoint["state_dict"]["w"].add_(1)
    shared.mul_(5)
    checkpoint["loops"]["progress"]["batches"].append(3)
    checkpoint["loops"]["positions"][0] = 99
    checkpoint["callbacks"]["Stop"]["seen"].add(3)
    checkpoint["epoch"] = 7
    io.teardown()
    written = torch.load(tmp_path / "a.ckpt", weights_only=False)
    assert torch.equal(written["state_dict"]["w"], torch.zeros(4))
    assert torch.equal(written["state_dict"]["tied"], torch.ones(3))
    assert written["state_dict"]["tied"] is written["state_dict"]["also_tied"]  # shared stays shared
    assert written["loops"] == {"progress": {"batches": [1, 2]}, "positions": written["loops"]["positions"]}
    assert written["loops"]["positions"].tolist() == [0, 1, 2]
    assert written["callbacks"]["Stop"]["seen"] == {1, 2} and "epoch" not in written


def test_a_failed_background_save_is_raised_by_the_strategy_at_the_next_step(tmp_path):
    io = AsyncCheckpointIO(Slow(delay=0.0, fail=True))
    strategy = Trainer(plugins=[io], logger=False).strategy
    strategy.raise_failed_checkpoint_save()  # nothing pending, nothing failed
    io.save_checkpoint({"state_dict": {"w": torch.ones(2)}}, tmp_path / "lost.ckpt")
    with pytest.raises(RuntimeError, match=r"save failed: '.*lost\.ckpt' was not written \(OSError") as raised:
        for _ in range(200):  # the training loop's steps, until the background write has failed
            strategy.raise_failed_checkpoint_save()
            time.sleep(0.005)
    assert isinstance(raised.value.__cause__, OSError) and raised.value.__cause__.errno == 28
    strategy.raise_failed_checkpoint_save()  # reported once
    io.teardown()
    assert not (tmp_path / "lost.ckpt").exists()
    Trainer(logger=False).strategy.raise_failed_checkpoint_save()  # the default writer: nothing to report


def test_fit_stops_at_the_step_after_a_background_save_failed(tmp_path):
    """The training loop asks after every batch: the run does not train on for steps (or epochs) without the
    checkpoint it believes it wrote."""
    from fulmen.callbacks import Callback, ModelCheckpoint
    from fulmen.demos.boring_classes import BoringModel

    class Steps(Callback):
        def __init__(self):
            self.trained = 0

        def on_train_batch_end(self, *args):
            self.trained += 1
            time.sleep(0.02)  # a step's time: the failing background write ends within it

    steps = Steps()
    trainer = Trainer(max_steps=40, plugins=[AsyncCheckpointIO(Slow(delay=0.0, fail=True))], logger=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                      callbacks=[steps, ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=10)])  # fmt: skip
    with pytest.raises(RuntimeError, match=r"step=10\.ckpt' was not written \(OSError: \[Errno 28\]"):
        trainer.fit(BoringModel())
    assert steps.trained <= 12, steps.trained  # step 10 saved; stopped at the next (or the one after)


def test_a_link_is_made_only_once_its_checkpoint_is_complete_and_never_onto_a_failed_one(tmp_path):
    inner = Slow(delay=0.2)
    io = AsyncCheckpointIO(inner)
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}}, tmp_path / "a.ckpt")
    io.link_checkpoint(tmp_path / "a.ckpt", tmp_path / "last.ckpt")
    assert not os.path.lexists(tmp_path / "last.ckpt"), "the link was made before its checkpoint was written"
    io.wait()
    assert os.readlink(tmp_path / "last.ckpt") == "a.ckpt"
    inner.fail = True
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}}, tmp_path / "b.ckpt")
    io.link_checkpoint(tmp_path / "b.ckpt", tmp_path / "last.ckpt")
    with pytest.raises(RuntimeError, match=r"b\.ckpt' was not written"):
        io.wait()
    assert os.readlink(tmp_path / "last.ckpt") == "a.ckpt"  # still the complete one
    io.teardown()


def test_save_last_link_never_names_a_checkpoint_still_being_written(tmp_path):
    """``ModelCheckpoint(save_last="link")`` with background saves: at every moment a resume could start,
    ``last.ckpt`` names a complete file (or does not exist yet)."""
    from fulmen.callbacks import Callback, ModelCheckpoint
    from fulmen.demos.boring_classes import BoringModel

    class Watch(Callback):
        def __init__(self):
            self.dangling = 0

        def on_train_batch_start(self, *args):
            last = tmp_path / "last.ckpt"
            self.dangling += os.path.lexists(last) and not last.exists()

    watch = Watch()
    trainer = Trainer(max_steps=6, plugins=[AsyncCheckpointIO(Slow(delay=0.05))], logger=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                      callbacks=[watch, ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_last="link")])  # fmt: skip
    trainer.fit(BoringModel())
    assert watch.dangling == 0
    assert os.readlink(tmp_path / "last.ckpt") == "epoch=0-step=6.ckpt"
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == ["epoch=0-step=6.ckpt", "last.ckpt"]
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"] == 6


def test_the_runs_own_error_stays_the_one_raised_when_a_background_save_also_failed(tmp_path, caplog):
    """A step raises while a failing background write is still running: the user sees their error (the save's
    is logged and attached as a note), and the teardown still restored the signal handlers."""
    from fulmen.callbacks import ModelCheckpoint
    from fulmen.demos.boring_classes import BoringModel

    class Fails(BoringModel):
        def training_step(self, batch, batch_idx):
            if batch_idx == 2:
                raise ValueError("the user's error")
            return super().training_step(batch, batch_idx)

    before = signal.getsignal(signal.SIGTERM)
    trainer = Trainer(max_steps=10, plugins=[AsyncCheckpointIO(Slow(delay=0.5, fail=True))], logger=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                      callbacks=[ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=2)])  # fmt: skip
    with pytest.raises(ValueError, match="the user's error") as raised:
        trainer.fit(Fails())
    assert "step=2.ckpt' was not written" in caplog.text
    if sys.version_info >= (3, 11):
        assert any("step=2.ckpt' was not written" in note for note in raised.value.__notes__)
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_preemption_whose_checkpoint_fails_ends_with_the_save_error(tmp_path):
    """SIGTERM is a stop meant to leave a checkpoint: when its background write fails, the run ends with that
    error (not the clean exit that would let a scheduler requeue it believing it saved)."""
    from fulmen.demos.boring_classes import BoringModel

    class Preempted(BoringModel):
        def training_step(self, batch, batch_idx):
            if batch_idx == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            return super().training_step(batch, batch_idx)

    before = signal.getsignal(signal.SIGTERM)
    trainer = Trainer(max_steps=10, plugins=[AsyncCheckpointIO(Slow(delay=0.1, fail=True))], logger=False,
                      enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
                      enable_checkpointing=False)  # fmt: skip
    with pytest.raises(RuntimeError, match=r"interrupted\.ckpt' was not written"):
        trainer.fit(Preempted())
    assert signal.getsignal(signal.SIGTERM) == before
    assert not (tmp_path / "interrupted.ckpt").exists()


def test_checkpoint_ios_without_the_method_are_accepted():
    class Minimal(CheckpointIO):  # written before raise_failed_save existed: it inherits the no-op
        def save_checkpoint(self, checkpoint, path, storage_options=None): ...

        def load_checkpoint(self, path, map_location=None, weights_only=None):
            return {}

        def remove_checkpoint(self, path): ...

    Trainer(plugins=[Minimal()], logger=False).strategy.raise_failed_checkpoint_save()
    AsyncCheckpointIO(Minimal()).raise_failed_save()

    # what a Lightning plugin subclasses: Fabric's base, which has no such method
    fabric_base = type("CheckpointIO", (), {"teardown": lambda self: None})

    class Lightnings(fabric_base):  # type: ignore[misc, valid-type]
        def save_checkpoint(self, checkpoint, path, storage_options=None): ...

        def load_checkpoint(self, path, map_location=None, weights_only=None):
            return {}

        def remove_checkpoint(self, path): ...

    assert not hasattr(Lightnings(), "raise_failed_save")
    Trainer(plugins=[Lightnings()], logger=False).strategy.raise_failed_checkpoint_save()
    AsyncCheckpointIO(Lightnings()).raise_failed_save()


# -- multi-process and SIGKILL runs (subprocesses) ------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_fsdp_checkpoint_shardss_written_in_the_background_resume_like_synchronous_ones(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "src")]), OMP_NUM_THREADS="1",
               PYTHONWARNINGS="ignore")  # fmt: skip
    for key in [k for k in env if k.startswith("SLURM_")] + ["RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_PORT"]:
        env.pop(key, None)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
               f"--master_port={_free_port()}", str(Path(__file__).with_name("async_fsdp_run.py")), str(tmp_path)]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    # rank 0 completed the background saves on AsyncCheckpointIO's thread, the synchronous ones in place
    assert ranks[0]["async_threads"] == ["fulmen-checkpoint_0"] and ranks[0]["sync_threads"] == ["MainThread"]
    for name in ("all", "rotated"):
        sync, background = tmp_path / "sync" / name, tmp_path / "async" / name
        assert sorted(os.listdir(background)) == sorted(os.listdir(sync))  # rotation removed the same ones
        for checkpoint in sorted(os.listdir(sync)):
            expected = distributed_checkpoint.load_consolidated(sync / checkpoint)
            written = distributed_checkpoint.load_consolidated(background / checkpoint)
            assert written["global_step"] == expected["global_step"]
            for key, tensor in expected["state_dict"].items():
                assert torch.equal(written["state_dict"][key], tensor), (checkpoint, key)
            momentum = [s["momentum_buffer"] for s in expected["optimizer_states"][0]["state"].values()]
            assert all(torch.equal(a, s["momentum_buffer"]) for a, s in
                       zip(momentum, written["optimizer_states"][0]["state"].values()))  # fmt: skip
    hidden = [p for name in ("all", "rotated") for p in (tmp_path / "async" / name).iterdir() if p.name.startswith(".")]
    assert not hidden, "nothing half-written is left"
    for rank in ranks:
        for key, tensor in rank["sync"].items():
            assert torch.equal(rank["async"][key], tensor) and torch.equal(rank["resumed"][key], tensor), key


KILL_SCRIPT = Path(__file__).with_name("async_kill_run.py")


def _start(directory: Path, resume: bool) -> subprocess.Popen[str]:
    """A run of async_kill_run.py, importing; it waits for :func:`_go`."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "src")]), PYTHONWARNINGS="ignore")
    command = [sys.executable, str(KILL_SCRIPT), str(directory)] + (["--resume"] if resume else [])
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)  # fmt: skip


def _go(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("go\n")
    proc.stdin.close()
    proc.stdin = None  # closed: communicate() must not flush it


def _kill_during_a_write(proc: subprocess.Popen[str], directory: Path, nth: int, at_bytes: int) -> None:
    """SIGKILL ``proc`` while it writes ``last.ckpt`` in the background for the ``nth`` time: as soon as that
    write's temporary file appears (``at_bytes=0``), or once it holds ``at_bytes`` bytes. The temporaries of an
    earlier killed run do not count (listed now: the process is still importing, it removes them later)."""
    stale = set(os.listdir(directory)) if directory.exists() else set()
    seen: set[str] = set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        names = os.listdir(directory) if directory.exists() else []
        for name in names:
            if name.startswith(".last.ckpt.") and name.endswith(".tmp") and name not in stale:
                seen.add(name)
                if len(seen) < nth:
                    continue
                try:
                    size = os.path.getsize(directory / name)
                except FileNotFoundError:  # renamed into place meanwhile: wait for the next one
                    nth += 1
                    continue
                if size >= at_bytes:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(timeout=30)
                    return
        time.sleep(0.001)
    raise AssertionError(f"no background write to kill (exit {proc.poll()}): {proc.communicate()[1][-3000:]}")


def _last(directory: Path) -> int:
    """``last.ckpt``: a whole checkpoint of one step (its weights all -global_step), loadable safely."""
    checkpoint = torch.load(directory / "last.ckpt", weights_only=True)
    step = checkpoint["global_step"]
    weight = checkpoint["state_dict"]["weight"]
    assert torch.equal(weight, torch.full_like(weight, -float(step))), "the checkpoint mixes two steps"
    return step


@pytest.mark.slow
def test_sigkill_at_any_moment_of_a_background_write_leaves_a_whole_last_checkpoint(tmp_path):
    directory = tmp_path / "ck"
    previous = 0
    killed_mid_write = 0
    run = _start(directory, resume=False)
    # when a write's file appears; when it holds 4 MB of its 16 MB; again when it appears, in resumed runs
    for nth, at_bytes in ((3, 0), (2, 4 << 20), (1, 0)):
        following = _start(directory, resume=True)  # imports while this run trains
        _go(run)
        _kill_during_a_write(run, directory, nth, at_bytes)
        assert run.returncode == -signal.SIGKILL
        started = int(run.stdout.read().split("start ")[1].split()[0]) if run.stdout else -1
        assert started == previous, "the resumed run did not start from last.ckpt"
        killed_mid_write += any(p.name.endswith(".tmp") for p in directory.iterdir())
        step = _last(directory)
        assert step >= max(previous, 1), "the previous complete checkpoint was lost"
        previous, run = step, following
    assert killed_mid_write, "no kill landed while a checkpoint was being written"
    _go(run)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err[-3000:]
    assert f"start {previous}" in out and f"end {STEPS}" in out  # and the weights of STEPS steps (checked there)
    assert _last(directory) == STEPS
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")], "stale temporaries are cleaned up"

"""Every check that needs a CUDA GPU, in one call: ``python benchmarks/gpu_checks.py``.

1. No hidden host-device syncs: the training loop runs under ``torch.cuda.set_sync_debug_mode("error")``
   from each batch's start to its end (logging happens after the batch, every ``log_every_n_steps``), for
   '32-true', 'bf16-mixed' and manual optimization. '16-mixed' runs under "warn" and reports its syncs:
   ``GradScaler.step`` reads the inf/NaN flag on the host once per step, by torch's design.
2. '16-mixed' with the CUDA GradScaler trains like a hand-written AMP loop (autocast, scaled backward,
   unscale before clipping, skipped steps leave the scheduler alone), automatic and manual optimization.
3. Step time of a small convnet: '32-true', '16-mixed', 'bf16-mixed', and '32-true' with ``compile=True``.
4. DDP with NCCL, one process per GPU (torchrun, ``strategy="ddp"``): the same weights as one GPU on the
   global batch, and no host sync in the step (DDP's all-reduce and ``sync_dist`` logging included).
5. The batch-size finder against real CUDA out-of-memory errors (power, then binsearch): both finish, with a
   size that ran and memory freed between trials.
6. The ecosystem on the device: DeviceStatsMonitor logs the CUDA allocator's statistics, ThroughputMonitor
   logs rates and FLOPs, AsyncCheckpointIO saves CUDA weights (snapshot to host memory) that load back equal,
   EMAWeightAveraging keeps its average on the GPU, and the PyTorch profiler's trace holds CUDA kernels.

7. FSDP (FSDP2) with NCCL, one process per GPU: the weights of one GPU on the global batch (each Linear its
   own unit), no host sync in the step, an exact resume from a sharded checkpoint, consolidation of a
   sharded checkpoint on the CPU, and '16-mixed' with the sharded gradient scaler.

8. Exact mid-epoch resume on the device: the exact-resume test run killed with SIGKILL three times and resumed,
   deterministic algorithms on: bitwise the weights of an uninterrupted run.
9. ``Trainer(compile=True)``: training, a checkpoint with the module's own parameter names that loads into an
   uncompiled module with equal weights, and a compiled fit resumed from it.
10. Data pipelines on the device: sample seeding leaves the CUDA generator alone (a batch loaded in the main
   process changes no GPU random number), and the exact-resume run with random augmentation in the dataset,
   two persistent workers, killed with SIGKILL mid-validation and resumed, ends bitwise equal.
11. AsyncCheckpointIO with CUDA weights: the snapshot lands in pinned host memory, reused from save to save,
   and holds the weights of the moment of the save; FSDP's sharded checkpoints written in the background (in
   check 7) equal the synchronous ones.

Prints a table and, when ``$OUT`` is set, writes ``$OUT/gpu_checks.json``. ``--cpu-dry-run`` runs checks 2,
3, 4 and 7 on the CPU (float16 autocast with a CPU scaler, DDP and FSDP over gloo with two processes) to test the script
itself where no GPU is around.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
import warnings
from typing import Any

import torch
from torch import nn

import fulmen
from fulmen.plugins import MixedPrecision
from fulmen.utilities.in_memory import InMemoryDataLoader

RESULTS: list[tuple[str, str, str]] = []  # check, outcome, detail


def report(check: str, ok: bool | None, detail: str) -> None:
    RESULTS.append((check, {True: "PASS", False: "FAIL", None: "info"}[ok], detail))


class MLP(fulmen.LightningModule):
    def __init__(self, manual: bool = False, clip: float | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 10))
        self.automatic_optimization = not manual
        self.clip = clip

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss, prog_bar=True)
        if self.automatic_optimization:
            return loss
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(loss)
        if self.clip:
            self.clip_gradients(opt, gradient_clip_val=self.clip)
        opt.step()
        self.lr_schedulers().step()
        return None

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        if self.automatic_optimization:
            return {"optimizer": opt, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
        return [opt], [scheduler]


def data(device: str, n: int = 64 * 32) -> InMemoryDataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 32, generator=g).to(device)
    y = torch.randint(0, 10, (n,), generator=g).to(device)
    return InMemoryDataLoader((x, y), batch_size=32)


class SyncWatch(fulmen.Callback):
    """The sync debug mode is on from each batch's start to its end; syncs there raise (or warn).
    ``from_step``: batches before it are not watched (warm-up done once by torch itself)."""

    def __init__(self, mode: str, from_step: int = 0) -> None:
        self.mode = mode
        self.from_step = from_step
        self.seen = 0

    def on_train_batch_start(self, *args: Any) -> None:
        self.seen += 1
        if self.seen > self.from_step:
            torch.cuda.set_sync_debug_mode(self.mode)

    def on_train_batch_end(self, *args: Any) -> None:
        torch.cuda.set_sync_debug_mode("default")


def check_syncs(precision: str, manual: bool = False) -> None:
    name = f"no host sync in the step, {precision}" + (" (manual)" if manual else "")
    mode = "warn" if precision == "16-mixed" else "error"
    trainer = fulmen.Trainer(
        max_epochs=1, precision=precision, accelerator="cuda", devices=1, callbacks=[SyncWatch(mode)],
        log_every_n_steps=50, enable_progress_bar=False, enable_checkpointing=False, gradient_clip_val=None
        if manual else 1.0, logger=fulmen.loggers.CSVLogger(os.environ.get("TMPDIR", "/tmp")),
    )  # fmt: skip
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer.fit(MLP(manual=manual, clip=1.0 if manual else None), data("cuda"))
    except RuntimeError as err:
        report(name, False, f"a sync in the hot loop: {str(err).splitlines()[0][:160]}")
        return
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchronizing" in str(w.message).lower()]
    if mode == "error":
        report(name, True, f"{trainer.global_step} steps under set_sync_debug_mode('error')")
    else:
        per_step = len(syncs) / max(1, trainer.global_step)
        report(name, None, f"{per_step:.1f} syncs/step under 'warn' (GradScaler.step's inf check)")


def hand_amp(device: str, steps: int, init_scale: float, manual: bool) -> tuple[nn.Module, Any, int]:
    model = MLP()
    net, opt = model.net, torch.optim.SGD(model.net.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    net.to(device)
    scaler = torch.amp.GradScaler(device, init_scale=init_scale)
    skipped = 0
    for x, y in list(data(device))[:steps]:
        with torch.autocast(device, dtype=torch.float16):
            loss = nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        scale = scaler.get_scale()
        scaler.step(opt)
        scaler.update()
        stepped = scaler.get_scale() >= scale
        skipped += not stepped
        if stepped or manual:  # manual optimization: the user's loop steps its scheduler every batch
            scheduler.step()
    return net, scheduler, skipped


def check_amp_parity(device: str, manual: bool) -> None:
    name = f"16-mixed + GradScaler vs hand loop ({'manual' if manual else 'automatic'}, {device})"
    init_scale = 2.0**24  # large: the first steps overflow and are skipped, as at the start of real runs
    plugin = MixedPrecision("16-mixed", device, scaler=torch.amp.GradScaler(device, init_scale=init_scale))
    model = MLP(manual=manual, clip=1.0 if manual else None)
    trainer = fulmen.Trainer(
        max_epochs=1, plugins=[plugin], accelerator=device, devices=1, logger=False, enable_progress_bar=False,
        enable_checkpointing=False, enable_model_summary=False, gradient_clip_val=None if manual else 1.0,
    )  # fmt: skip
    trainer.fit(model, data(device))
    steps = trainer.num_training_batches
    ref, ref_scheduler, skipped = hand_amp(device, steps, init_scale, manual)
    diff = max((p - q).abs().max().item() for p, q in zip(model.net.parameters(), ref.parameters()))
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    same_schedule = scheduler.last_epoch == ref_scheduler.last_epoch
    ok = diff <= 1e-4 and same_schedule and skipped > 0
    report(name, ok, f"max |w - w_ref| = {diff:.2e}, {skipped} skipped steps, scheduler at "
           f"{scheduler.last_epoch} (hand loop {ref_scheduler.last_epoch})")  # fmt: skip


class ConvNet(fulmen.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(
            nn.Conv2d(3, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2), nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
            nn.Flatten(), nn.Linear(128, 10),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return nn.functional.cross_entropy(self(batch[0]), batch[1])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Clock(fulmen.Callback):
    """Time per step over the epoch's second half (after warm-up and compilation)."""

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == trainer.num_training_batches // 2:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.start, self.first = time.perf_counter(), batch_idx

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.per_step = (time.perf_counter() - self.start) / (trainer.num_training_batches - self.first)


def step_times(device: str, batches: int, repeats: int) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batches * 64, 3, 32, 32, generator=g).to(device)
    y = torch.randint(0, 10, (batches * 64,), generator=g).to(device)
    variants: dict[str, dict[str, Any]] = {
        "32-true": {}, "16-mixed": {"precision": "16-mixed"}, "bf16-mixed": {"precision": "bf16-mixed"},
        "32-true + compile": {"compile": True},
    }  # fmt: skip
    if device == "cpu":
        variants = {"32-true": {}, "bf16-mixed": {"precision": "bf16-mixed"}}
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, kwargs in variants.items():
            clock = Clock()
            trainer = fulmen.Trainer(max_epochs=1, accelerator=device, devices=1, logger=False, callbacks=[clock],
                                     enable_progress_bar=False, enable_checkpointing=False,
                                     enable_model_summary=False, **kwargs)  # fmt: skip
            trainer.fit(ConvNet(), InMemoryDataLoader((x, y), batch_size=64))
            times[name].append(clock.per_step)
    base = statistics.median(times["32-true"])
    for name, values in times.items():
        median = statistics.median(values)
        report(
            f"convnet step time, {name}",
            None,
            f"{median * 1e3:.2f} ms ({base / median:.2f}x the speed of 32-true)",
        )


def _failure(output: str) -> str:
    """The error a torchrun job ended with: fulmen's report of the failing rank, else the last
    'SomethingError: ...' line that is not torchrun's own summary, else the output's last lines."""
    lines = [line.strip() for line in output.splitlines()]
    reports = [line for line in lines if line.startswith("fulmen: rank") and " failed with " in line]
    errors = reports or [line for line in lines if re.search(r"\w+(Error|Exception): ", line)
                         and "ChildFailedError" not in line]  # fmt: skip
    return (errors[-1] if errors else " / ".join(output.strip().splitlines()[-3:]))[:300]


def _torchrun_worker(flag: str, outdir: str, device: str, processes: int, name: str, timeout: int) -> bool:
    """This script's ``flag`` worker under torchrun, one process per device; a failure is reported as ``name``."""
    import socket
    import subprocess

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")  # fmt: skip
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
               "--master_addr=127.0.0.1", f"--master_port={port}", __file__, flag, outdir, device]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode != 0:
        report(name, False, _failure(done.stdout + done.stderr))
    return done.returncode == 0


def ddp_worker(outdir: str, accelerator: str) -> None:
    """One rank of check 4 (started by torchrun): the DDP test module, batch 4 per process."""
    from tests.strategies.ddp_model import Model, loader

    devices = int(os.environ["LOCAL_WORLD_SIZE"])
    # torch's DDP rebuilds its gradient buckets once, in its second forward, and that reads a CUDA value on the
    # host: the steady state is watched from the third batch on
    callbacks = [SyncWatch("error", from_step=2)] if accelerator == "cuda" else []
    trainer = fulmen.Trainer(accelerator=accelerator, devices=devices, strategy="ddp", max_epochs=2, logger=False,
                             enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                             callbacks=callbacks)  # fmt: skip
    model = Model()
    trainer.fit(model, loader(batch_size=4))
    if trainer.is_global_zero:
        backend = torch.distributed.get_backend() if torch.distributed.is_initialized() else "?"
        weights = {k: v.cpu() for k, v in model.state_dict().items()}
        torch.save({"weights": weights, "backend": backend, "world": trainer.world_size}, f"{outdir}/ddp.pt")


def check_ddp(device: str) -> None:
    import tempfile

    from tests.strategies.ddp_model import Model, loader

    processes = torch.cuda.device_count() if device == "cuda" else 2
    name = f"DDP, {processes} process(es), {'NCCL' if device == 'cuda' else 'gloo'}"
    with tempfile.TemporaryDirectory() as outdir:
        if not _torchrun_worker("--ddp-worker", outdir, device, processes, name, timeout=300):
            return
        result = torch.load(f"{outdir}/ddp.pt", weights_only=True)
    reference = Model()
    fulmen.Trainer(accelerator=device, devices=1, max_epochs=2, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, enable_checkpointing=False).fit(reference, loader(4 * processes))  # fmt: skip
    diff = max((result["weights"][k] - v.cpu()).abs().max().item() for k, v in reference.state_dict().items())
    syncs = ", no host sync in the step" if device == "cuda" else ""
    report(
        name,
        diff < 1e-5,
        f"backend {result['backend']}, world {result['world']}, max |w - w_one| = {diff:.2e}{syncs}",
    )


def fsdp_worker(outdir: str, accelerator: str) -> None:
    """One rank of check 7 (started by torchrun): FSDP with each Linear a unit, batch 4 per process, sharded
    checkpoints every 3 steps; then a resume from the step-3 checkpoint, and a '16-mixed' run (sharded scaler)."""
    from tests.strategies.fsdp_model import Wide, indexed_loader
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from fulmen.callbacks import ModelCheckpoint
    from fulmen.strategies import FSDPStrategy

    devices = int(os.environ["LOCAL_WORLD_SIZE"])

    class Quiet(Wide):
        """Wide without its record of the sample indices (reading them is a host sync by design)."""

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y, _ = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.log("loss", loss, on_step=True, on_epoch=True, sync_dist=True)
            return loss

    def run(ckpt_path: str | None = None, precision: str = "32-true", callbacks: list[Any] | None = None,
            plugins: list[Any] | None = None) -> Any:  # fmt: skip
        strategy = FSDPStrategy(auto_wrap_policy={nn.Linear}, state_dict_type="sharded")
        trainer = fulmen.Trainer(accelerator=accelerator, devices=devices, strategy=strategy, max_epochs=2,
                                 precision=precision, logger=False, enable_progress_bar=False,
                                 enable_model_summary=False, callbacks=callbacks or [], plugins=plugins,
                                 enable_checkpointing=bool(callbacks))  # fmt: skip
        model = Quiet()
        trainer.fit(model, indexed_loader(batch_size=4, shuffle=False), ckpt_path=ckpt_path)
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return trainer, full

    watch = [SyncWatch("error")] if accelerator == "cuda" else []
    every_3 = ModelCheckpoint(dirpath=f"{outdir}/ckpt", every_n_train_steps=3, save_top_k=-1)
    trainer, weights = run(callbacks=[every_3, *watch])
    _, resumed = run(ckpt_path=f"{outdir}/ckpt/epoch=0-step=3.ckpt")
    # the same checkpoints written in the background (AsyncCheckpointIO: DCP's async_save over a gloo group)
    from fulmen.plugins import AsyncCheckpointIO

    run(callbacks=[ModelCheckpoint(dirpath=f"{outdir}/ckpt_async", every_n_train_steps=3, save_top_k=-1)],
        plugins=[AsyncCheckpointIO()])  # fmt: skip
    half, _ = run(precision="16-mixed")
    if trainer.is_global_zero:
        backend = torch.distributed.get_backend() if torch.distributed.is_initialized() else "?"
        torch.save({"weights": weights, "resumed": resumed, "backend": backend, "world": trainer.world_size,
                    "half_loss": float(half.callback_metrics["loss_epoch"])}, f"{outdir}/fsdp.pt")  # fmt: skip


def check_fsdp(device: str) -> None:
    """Check 7: FSDP (FSDP2) with NCCL, one process per GPU: the weights of one GPU on the global batch, no host
    sync in the step, an exact resume from a sharded checkpoint, consolidation, and '16-mixed'."""
    import tempfile

    from tests.strategies.fsdp_model import Wide, indexed_loader

    from fulmen.checkpoint.sharded import load_consolidated

    processes = torch.cuda.device_count() if device == "cuda" else 2
    name = f"FSDP, {processes} process(es), {'NCCL' if device == 'cuda' else 'gloo'}"
    with tempfile.TemporaryDirectory() as outdir:
        if not _torchrun_worker("--fsdp-worker", outdir, device, processes, name, timeout=400):
            return
        result = torch.load(f"{outdir}/fsdp.pt", weights_only=True)
        consolidated = load_consolidated(f"{outdir}/ckpt/epoch=0-step=3.ckpt")
        background = load_consolidated(f"{outdir}/ckpt_async/epoch=0-step=3.ckpt")
    same_background = all(torch.equal(background["state_dict"][k], v) for k, v in consolidated["state_dict"].items())
    reference = Wide()
    fulmen.Trainer(accelerator=device, devices=1, max_epochs=2, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, enable_checkpointing=False).fit(
        reference, indexed_loader(4 * processes, shuffle=False))  # fmt: skip
    want = {k: v.cpu() for k, v in reference.state_dict().items()}
    diff = max((result["weights"][k] - v).abs().max().item() for k, v in want.items())
    resumed = max((result["resumed"][k] - v).abs().max().item() for k, v in result["weights"].items())
    ok = diff < 1e-5 and resumed == 0 and consolidated["global_step"] == 3 and result["half_loss"] == result["half_loss"]
    ok = ok and same_background
    syncs = ", no host sync in the step" if device == "cuda" else ""
    report(name, ok, f"backend {result['backend']}, world {result['world']}, max |w - w_one| = {diff:.2e}, "
                     f"resumed from a sharded checkpoint: max diff {resumed:.1e}, consolidated step "
                     f"{consolidated['global_step']}, written in the background: "
                     f"{'equal' if same_background else 'DIFFERENT'}, 16-mixed loss {result['half_loss']:.3f}{syncs}")  # fmt: skip


def check_cuda_resume(device: str) -> None:
    """Check 8: exact mid-epoch resume on the device: tests/checkpointing/resume_run.py (every RNG, dropout,
    shuffled data, accumulation, schedulers) killed with SIGKILL at three points and resumed each time, with
    deterministic algorithms on, ends with the bitwise weights of an uninterrupted run."""
    import subprocess
    import tempfile

    script = os.path.join(ROOT, "tests", "checkpointing", "resume_run.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               DETERMINISTIC="1", PYTHONWARNINGS="ignore")  # fmt: skip
    name = f"exact mid-epoch resume after SIGKILL ({device})"
    with tempfile.TemporaryDirectory() as folder:
        def run(out: str, *args: str) -> int:
            done = subprocess.run([sys.executable, script, out, *args], capture_output=True, text=True, env=env,
                                  timeout=300)  # fmt: skip
            if done.returncode not in (0, -9):
                report(name, False, _failure(done.stdout + done.stderr))
            return done.returncode

        if run(f"{folder}/ref", "--reference") != 0:
            return
        codes = [run(f"{folder}/run", "--resume", "--kill", point) for point in ("end:7", "val:22", "start:30")]
        codes.append(run(f"{folder}/run", "--resume"))
        if codes != [-9, -9, -9, 0]:
            report(name, False, f"exit codes {codes} (expected three SIGKILLs, then 0)")
            return
        ref = torch.load(f"{folder}/ref/final.pt", map_location="cpu")
        got = torch.load(f"{folder}/run/final.pt", map_location="cpu")
    same = ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)
    report(name, same, "killed at batches 7 (end), 22 (mid-validation), 30 (start); resumed weights "
                       f"{'bitwise equal to' if same else 'differ from'} the uninterrupted run's")  # fmt: skip


def check_data_resume(device: str) -> None:
    """Check 10: sample seeding on the device, and an exact resume with augmentation in worker processes."""
    import subprocess
    import tempfile

    from torch.utils.data import DataLoader, Dataset

    from fulmen.utilities.sample_seeds import sample_seeded

    class Noisy(Dataset):  # type: ignore[type-arg]
        def __len__(self) -> int:
            return 64

        def __getitem__(self, index: int) -> torch.Tensor:
            return torch.rand(4) + index

    if device == "cuda":
        torch.cuda.manual_seed(3)
        before = torch.cuda.get_rng_state()
        next(iter(sample_seeded(DataLoader(Noisy(), batch_size=8), lambda: 0, seed=0)))
        same = torch.equal(before, torch.cuda.get_rng_state())
        report("sample seeding leaves the CUDA generator alone", same,
               "CUDA RNG state " + ("unchanged" if same else "CHANGED") + " by a batch loaded in the main process")
    script = os.path.join(ROOT, "tests", "checkpointing", "resume_run.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
               DETERMINISTIC="1", PYTHONWARNINGS="ignore", AUGMENT="1", PERSIST="1")  # fmt: skip
    name = f"exact resume, augmentation in 2 persistent workers ({device})"
    with tempfile.TemporaryDirectory() as folder:
        codes = []
        for out, args in ((f"{folder}/ref", ["--reference"]), (f"{folder}/run", ["--resume", "--kill", "val:22"]),
                          (f"{folder}/run", ["--resume"])):  # fmt: skip
            done = subprocess.run([sys.executable, script, out, "--workers", "2", *args], capture_output=True,
                                  text=True, env=env, timeout=300)  # fmt: skip
            codes.append(done.returncode)
            if done.returncode not in (0, -9):
                report(name, False, _failure(done.stdout + done.stderr))
                return
        if codes != [0, -9, 0]:
            report(name, False, f"exit codes {codes} (expected 0, a SIGKILL, 0)")
            return
        ref = torch.load(f"{folder}/ref/final.pt", map_location="cpu")
        got = torch.load(f"{folder}/run/final.pt", map_location="cpu")
    same = ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)
    report(name, same, f"killed mid-validation (batch 22); resumed weights {'bitwise equal to' if same else 'differ from'} "
                       "the uninterrupted run's")  # fmt: skip


def check_compile_round_trip(device: str) -> None:
    """Check 9: Trainer(compile=True) trains, its checkpoint holds the module's own parameter names, loads into
    an uncompiled module with equal weights and resumes a compiled fit."""
    import tempfile

    from fulmen.callbacks import ModelCheckpoint

    name = f"compile=True training and checkpoint round trip ({device})"
    with tempfile.TemporaryDirectory() as folder:
        def trainer(epochs: int) -> fulmen.Trainer:
            last = ModelCheckpoint(dirpath=folder, save_last=True)
            return fulmen.Trainer(accelerator=device, devices=1, max_epochs=epochs, compile=True, logger=False,
                                  enable_progress_bar=False, enable_model_summary=False, callbacks=[last])  # fmt: skip

        model = MLP()
        fit = trainer(1)
        fit.fit(model, data(device))
        loaded = MLP.load_from_checkpoint(os.path.join(folder, "last.ckpt"), map_location="cpu")
        plain_names = all("_orig_mod" not in k for k in loaded.state_dict())
        equal = all(torch.equal(v.cpu(), model.state_dict()[k].cpu()) for k, v in loaded.state_dict().items())
        resumed = trainer(2)
        resumed.fit(MLP(), data(device), ckpt_path=os.path.join(folder, "last.ckpt"))
    ok = plain_names and equal and resumed.current_epoch == 2 and fit.global_step > 0
    report(name, ok, f"trained {fit.global_step} steps; checkpoint names {'plain' if plain_names else 'prefixed'}, "
                     f"weights {'equal' if equal else 'differ'} after loading, resumed to epoch {resumed.current_epoch}")  # fmt: skip


class Hungry(fulmen.LightningModule):
    """About 8 MB of activations per sample: an 80 GB GPU runs out of memory in the low thousands."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_size = 64
        self.net = nn.Sequential(nn.Linear(1024, 2048), nn.GELU(), nn.Linear(2048, 1))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        (x,) = batch
        return self.net(x.expand(-1, 256, -1)).square().mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self) -> Any:
        data = torch.utils.data.TensorDataset(torch.randn(1 << 16, 1, 1024))
        return torch.utils.data.DataLoader(data, batch_size=self.batch_size)


def check_batch_size_finder() -> None:
    from fulmen.tuner import Tuner

    for mode in ("power", "binsearch"):
        name = f"batch-size finder, real CUDA OOM ({mode})"
        trainer = fulmen.Trainer(accelerator="cuda", devices=1, logger=False, enable_progress_bar=False,
                                 enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
        model = Hungry()
        started = time.perf_counter()
        try:
            size = Tuner(trainer).scale_batch_size(
                model, mode=mode, init_val=256, max_val=1 << 16, steps_per_trial=1
            )
        except Exception as err:
            report(name, False, f"{type(err).__name__}: {str(err)[:200]}")
            continue
        free = torch.cuda.mem_get_info()[0] / 2**30
        report(name, size is not None and size < 1 << 16,
               f"chose {size} in {time.perf_counter() - started:.1f} s; {free:.1f} GiB free afterwards")  # fmt: skip


def check_ecosystem(device: str) -> None:
    import tempfile

    from fulmen.callbacks import DeviceStatsMonitor, EMAWeightAveraging, ThroughputMonitor
    from fulmen.checkpoint import files as checkpoint_io
    from fulmen.loggers import CSVLogger
    from fulmen.plugins import AsyncCheckpointIO
    from fulmen.profilers import PyTorchProfiler

    with tempfile.TemporaryDirectory() as folder:
        model = MLP()
        profiler = PyTorchProfiler(dirpath=folder, filename="trace")
        callbacks = [DeviceStatsMonitor(), ThroughputMonitor(batch_size_fn=lambda b: b[0].shape[0], window_size=5),
                     EMAWeightAveraging(decay=0.9)]  # fmt: skip
        trainer = fulmen.Trainer(accelerator=device, devices=1, max_epochs=2, limit_train_batches=20,
                                 log_every_n_steps=5, logger=CSVLogger(folder), callbacks=callbacks,
                                 plugins=[AsyncCheckpointIO()], profiler=profiler, enable_progress_bar=False,
                                 enable_model_summary=False, default_root_dir=folder)  # fmt: skip
        trainer.fit(model, data(device, n=20 * 32))
        with open(os.path.join(trainer.log_dir, "metrics.csv")) as f:
            header = f.readline()
        key = "allocated_bytes.all.current" if device == "cuda" else "cpu_percent"
        report("DeviceStatsMonitor on the device", key in header, f"{key!r} {'in' if key in header else 'missing from'} metrics.csv")
        report("ThroughputMonitor", "train/device/samples_per_sec" in header, "train/device/samples_per_sec logged")
        saved = checkpoint_io.load(trainer.checkpoint_callback.best_model_path, map_location="cpu")
        same = all(torch.equal(saved["state_dict"][k].cpu(), v.cpu()) for k, v in model.state_dict().items())
        report("AsyncCheckpointIO with device weights", same, "the saved (averaged) weights equal the module's at the end")
        with open(os.path.join(folder, "fit-trace.pt.trace.json")) as f:
            trace = f.read()
        kernels = '"cat": "kernel"' in trace
        report("PyTorchProfiler trace", kernels or device != "cuda",
               "CUDA kernels in the trace" if kernels else "no CUDA kernels (CPU run)")  # fmt: skip


def check_async_snapshot() -> None:
    """AsyncCheckpointIO with CUDA weights: the host copy lands in pinned memory, reused at the next save; the
    file holds the weights of the moment of the save although a kernel changes them right after (the copy is
    queued on the weights' stream and the background thread waits for it); the time a save blocks."""
    import tempfile

    from fulmen.plugins import AsyncCheckpointIO, TorchCheckpointIO

    class Noting(TorchCheckpointIO):
        def __init__(self) -> None:
            self.seen: list[tuple[bool, int]] = []

        def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
            weight = checkpoint["state_dict"]["w"]
            self.seen.append((weight.is_pinned(), weight.data_ptr()))
            super().save_checkpoint(checkpoint, path, storage_options)

    weight = torch.zeros(64 << 20, device="cuda")  # 256 MB
    inner = Noting()
    io = AsyncCheckpointIO(inner)
    blocked = []
    with tempfile.TemporaryDirectory() as folder:
        for step in range(3):
            weight.fill_(float(step))
            io.wait()  # the previous write is done: the time below is the snapshot's alone
            torch.cuda.synchronize()
            start = time.perf_counter()
            io.save_checkpoint({"state_dict": {"w": weight}}, os.path.join(folder, f"{step}.ckpt"))
            blocked.append(time.perf_counter() - start)
            weight.add_(100.0)  # training goes on at once
        io.teardown()
        written = [torch.load(os.path.join(folder, f"{step}.ckpt"), weights_only=True)["state_dict"]["w"]
                   for step in range(3)]  # fmt: skip
    same = all(torch.equal(w, torch.full_like(w, float(step))) for step, w in enumerate(written))
    pinned = all(p for p, _ in inner.seen)
    reused = len({address for _, address in inner.seen}) == 1
    report("AsyncCheckpointIO snapshot of CUDA weights", same and pinned and reused,
           f"the files hold the weights of their step: {same}; pinned: {pinned}; one buffer reused: {reused}; "
           f"blocked {blocked[0] * 1e3:.0f} ms at the first save, {statistics.median(blocked[1:]) * 1e3:.0f} ms "
           "after (256 MB)")  # fmt: skip


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-dry-run", action="store_true", help="run checks 2, 3, 4 and 7 on the CPU")
    parser.add_argument("--only", choices=("data-resume",), help="run one check only")
    parser.add_argument("--ddp-worker", nargs=2, metavar=("OUTDIR", "ACCELERATOR"), help=argparse.SUPPRESS)
    parser.add_argument("--fsdp-worker", nargs=2, metavar=("OUTDIR", "ACCELERATOR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ddp_worker or args.fsdp_worker:
        sys.path.insert(0, ROOT)
        (ddp_worker if args.ddp_worker else fsdp_worker)(*(args.ddp_worker or args.fsdp_worker))
        return 0
    warnings.filterwarnings("ignore", message=".*num_workers.*")
    if args.cpu_dry_run:
        device = "cpu"
    elif torch.cuda.is_available():
        device = "cuda"
    else:
        print("No CUDA device: nothing to check. (--cpu-dry-run tests the script on the CPU.)")
        return 2
    if device == "cuda":
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    if args.only == "data-resume":
        sys.path.insert(0, ROOT)
        check_data_resume(device)
        return _summary()
    if device == "cuda":
        for precision in ("32-true", "bf16-mixed", "16-mixed"):
            check_syncs(precision)
        check_syncs("32-true", manual=True)
    for manual in (False, True):
        check_amp_parity(device, manual)
    step_times(device, batches=40 if device == "cuda" else 6, repeats=3 if device == "cuda" else 1)
    sys.path.insert(0, ROOT)
    check_ddp(device)
    check_fsdp(device)
    check_cuda_resume(device)
    check_compile_round_trip(device)
    check_data_resume(device)
    if device == "cuda":
        check_batch_size_finder()
        check_async_snapshot()
    check_ecosystem(device)
    return _summary()


def _summary() -> int:
    width = max(len(r[0]) for r in RESULTS)
    for check, outcome, detail in RESULTS:
        print(f"{outcome:4s}  {check:{width}s}  {detail}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_checks.json"), "w") as f:
            json.dump([dict(zip(("check", "outcome", "detail"), r)) for r in RESULTS], f, indent=1)
    return 1 if any(outcome == "FAIL" for _, outcome, _ in RESULTS) else 0


if __name__ == "__main__":
    sys.exit(main())

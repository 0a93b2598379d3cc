"""FSDP (FSDP2) and 2-D model parallelism on CPU with gloo, started by torchrun (a world of one directly, with
the variables torchrun would set): the same training as one process on the global batch, shards of
1/world_size, sharded and full checkpoints, resharding, a SIGKILL during a save, and resuming mid-epoch on
another number of processes (DDP and FSDP)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import fulmen
from fulmen.checkpoint import sharded as distributed_checkpoint
from tests import prefetch
from tests.strategies.fsdp_model import GAN, Wide, gan_loader, indexed_loader

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "tests" / "strategies" / "fsdp_script.py")
STEPS_PER_EPOCH = 8  # 64 samples, a global batch of 8


def _torchrun(nproc: int, *args: str, expect_ok: bool = True, environ: dict[str, str], cwd: Path) -> str:
    """``torchrun --nproc_per_node=nproc SCRIPT *args``. One process is started directly, with the variables
    torchrun gives its single worker: what is tested there is FSDP on a world of one, not torchrun's agent
    (whose start, about 2 s, would be all the difference)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    for key in [k for k in env if k.startswith(("SLURM_", "TORCHELASTIC_"))] + ["RANK", "LOCAL_RANK", "WORLD_SIZE",
                                                                               "LOCAL_WORLD_SIZE", "MASTER_PORT"]:  # fmt: skip
        env.pop(key, None)
    if nproc == 1:
        env.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", GROUP_RANK="0",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))  # fmt: skip
        command = [sys.executable, SCRIPT, *args]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                   "--master_addr=127.0.0.1", f"--master_port={port}", SCRIPT, *args]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)
    output = proc.stdout + proc.stderr
    if expect_ok:
        assert proc.returncode == 0, output[-4000:]
    return output


def _results(outdir: Path, scenario: str, ranks: int) -> list[dict]:
    return [torch.load(outdir / f"{scenario}-rank{r}.pt", weights_only=False) for r in range(ranks)]


def _all_runs(out: Path, environ: dict[str, str]) -> dict:
    """Every multi-process run, in order: 2 processes (training, checkpoints); 1 process resuming their
    mid-epoch checkpoints and writing its own; 4 processes resuming the 2-process ones (and 2-D parallelism);
    2 processes resuming the 1-process one, then rank 0 killed during a save (that launch fails by design)."""

    def torchrun(nproc: int, *args: str, expect_ok: bool = True) -> str:
        return _torchrun(nproc, *args, expect_ok=expect_ok, environ=environ, cwd=out)

    torchrun(2, "main", str(out))
    two = [out / "sharded" / "epoch=0-step=3.ckpt", out / "ddp" / "epoch=0-step=3.ckpt"]
    torchrun(1, "resume", str(out), *map(str, two))
    ones = _results(out, "resume", 1)
    (out / "resume-rank0.pt").rename(out / "resume1-rank0.pt")
    torchrun(4, "resume", str(out), *map(str, two))
    fours = _results(out, "resume", 4)
    one = out / "one" / "epoch=0-step=3.ckpt"
    kill_output = torchrun(2, "resume", str(out), str(one), "--then-kill", expect_ok=False)
    twos_from_one = _results(out, "resume", 2)
    return {"out": out, "main": _results(out, "main", 2), "1": ones, "4": fours, "2from1": twos_from_one,
            "two": two, "one": one, "kill_output": kill_output}  # fmt: skip


prefetch.register("fsdp-runs", __name__, _all_runs)  # started in the background when these tests are selected


@pytest.fixture(scope="module")
def runs():
    return prefetch.result("fsdp-runs")


def _single(model, loader, **kwargs):
    trainer = fulmen.Trainer(accelerator="cpu", devices=1, max_epochs=kwargs.pop("max_epochs", 2), logger=False,
                             enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                             **kwargs)  # fmt: skip
    trainer.fit(model, loader)
    return model


def _close(weights: dict, reference: dict, atol: float = 1e-5) -> None:
    assert sorted(weights) == sorted(reference)
    for name, value in reference.items():
        torch.testing.assert_close(weights[name].float(), value.float(), rtol=0, atol=atol, msg=name)


@pytest.mark.slow
def test_fsdp_trains_like_one_process_with_accumulation_and_clipping(runs):
    """FSDP with every Linear its own unit, accumulating over 2 batches and clipping by the norm of the
    sharded gradients: the weights of one process on the global batch. Gradient sync was held back on the
    accumulating batches (4 of the 8 batches an epoch, 2 epochs). Validation and prediction afterwards run
    through the sharded model."""
    model = _single(Wide(), indexed_loader(8, shuffle=False), accumulate_grad_batches=2, gradient_clip_val=0.5)
    reference = model.state_dict()
    trainer = fulmen.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False)
    val_loss = trainer.validate(model, indexed_loader(8, shuffle=False), verbose=False)[0]["val_loss"]
    predictions = torch.cat(trainer.predict(model, indexed_loader(4, shuffle=False)))
    for rank in (0, 1):
        result = runs["main"][rank]["fsdp"]
        _close(result["weights"], reference)
        assert result["blocked"] == 8
        assert result["global_step"] == 8
        assert result["val_loss"] == pytest.approx(val_loss, abs=1e-6)  # sync_dist: the mean over both ranks
        # each rank predicts its share (a DistributedSampler: samples r, r+2, ...)
        assert result["predictions"] == predictions.view(-1, 2)[:, rank].tolist()


@pytest.mark.slow
def test_each_rank_holds_half_of_parameters_gradients_and_optimizer_state(runs):
    """Measured from the local shards at the second optimizer step: parameters, gradients and SGD momentum."""
    for rank in (0, 1):
        sizes = runs["main"][rank]["fsdp"]["sizes"]
        assert sizes["dtensors"]
        assert sizes["full"] == 3 * sum(p.numel() for p in Wide().parameters())
        assert sizes["local"] == pytest.approx(sizes["full"] / 2, rel=0.02)


@pytest.mark.slow
def test_bf16_mixed_under_fsdp(runs):
    """bf16-mixed: float32 shards, autocast, float32 reduction: the numbers of DDP under the same flag (each
    process rounds its own half-batch gradients to bfloat16, so one process on the global batch differs by
    bfloat16's rounding, not more)."""
    reference = _single(Wide(), indexed_loader(8, shuffle=False), precision="bf16-mixed").state_dict()
    for rank in (0, 1):
        main = runs["main"][rank]
        _close(main["bf16"]["weights"], main["ddp_bf16"]["weights"])
        _close(main["bf16"]["weights"], reference, atol=2e-2)


@pytest.mark.slow
def test_manual_optimization_with_toggle_model_under_fsdp(runs):
    """Seed 001's GAN (two optimizers, toggle_model(sync_grad=...) accumulating over two batches)."""
    reference = _single(GAN(), gan_loader(batch_size=8)).state_dict()
    for rank in (0, 1):
        _close(runs["main"][rank]["gan"]["weights"], reference)


@pytest.mark.slow
def test_tensor_parallel_size_two_trains_like_one_process(runs):
    """ModelParallelStrategy(1, 2): the MLP's layers split column- then row-wise over the two processes,
    which see the same batches."""
    reference = _single(Wide(), indexed_loader(8, shuffle=False)).state_dict()
    for rank in (0, 1):
        assert runs["main"][rank]["tp"]["mesh"] == (1, 2)
        _close(runs["main"][rank]["tp"]["weights"], reference)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "cpu_offload"])
def test_sharding_strategies_and_offload_train_like_one_process(runs, case):
    """Parameters kept until backward (units picked by torch's ModuleWrapPolicy, a policy callable),
    replicated (a (2, 1) mesh), hybrid over a (1, 2) mesh, and CPU offload with activation checkpointing: the
    same numbers."""
    reference = _single(Wide(), indexed_loader(8, shuffle=False)).state_dict()
    meshes = {"NO_SHARD": (2, 1), "HYBRID_SHARD": (1, 2)}
    for rank in (0, 1):
        assert runs["main"][rank][case]["mesh"] == meshes.get(case, (2,))
        _close(runs["main"][rank][case]["weights"], reference)


@pytest.mark.slow
def test_two_dimensional_parallelism_on_four_processes(runs):
    """ModelParallelStrategy(2, 2): tensor parallel pairs, FSDP across them, each pair on its share of the
    data: the weights of one process on the global batch."""
    reference = _single(Wide(), indexed_loader(8, shuffle=False)).state_dict()
    for result in runs["4"]:
        assert result["2d"]["mesh"] == (2, 2)
        _close(result["2d"]["weights"], reference)


@pytest.mark.slow
def test_checkpoint_decisions_agree_between_ranks(runs):
    """A monitored value that differs per rank: both ranks keep rank 0's best (rank 0's score improves every
    epoch; rank 1's never would), and the sharded save under that name completed."""
    results = [runs["main"][r]["agreed"] for r in (0, 1)]
    assert results[0] == results[1] and results[0]["score"] == 0.0
    assert distributed_checkpoint.is_sharded_checkpoint(results[0]["best"])


@pytest.mark.slow
def test_init_module_empty_init_materialises_sharded(runs):
    for rank in (0, 1):
        meta = runs["main"][rank]["meta"]
        assert meta["on_meta"] and meta["local"] * 2 == meta["full"]
        assert meta["loss"] == meta["loss"]  # trained to a number (materialised and initialised)


@pytest.mark.slow
def test_stop_decisions_are_agreed_under_fsdp(runs):
    assert [runs["main"][r]["early_stopping"] for r in (0, 1)] == [{"current_epoch": 2, "global_step": 16}] * 2


@pytest.mark.slow
def test_batch_size_finder_agrees_across_ranks_before_an_fsdp_fit(runs):
    for rank in (0, 1):
        assert runs["main"][rank]["batch_size"] == {"size": 16, "attribute": 16, "sharded": "DTensor"}


@pytest.mark.slow
def test_checkpoint_shards_resumes_exactly_on_the_same_processes(runs):
    for rank in (0, 1):
        main = runs["main"][rank]
        _close(main["sharded_resumed"]["weights"], main["uninterrupted"]["weights"], atol=0)
        assert main["sharded_resumed"]["global_step"] == 2 * STEPS_PER_EPOCH
    directory = runs["out"] / "sharded" / "epoch=0-step=3.ckpt"
    assert distributed_checkpoint.is_sharded_checkpoint(directory)
    assert sorted(p.name for p in directory.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp", "meta.pt"]
    assert not [p for p in directory.parent.iterdir() if p.name.startswith(".")]  # nothing left half-written


@pytest.mark.slow
def test_full_checkpoint_is_an_ordinary_file_and_equals_the_consolidated_sharded_one(runs, tmp_path):
    out = runs["out"]
    full = torch.load(out / "full.ckpt", weights_only=True)
    consolidated = distributed_checkpoint.consolidate(out / "same_state_sharded.ckpt", tmp_path / "c.ckpt")
    assert consolidated.keys() == full.keys()
    _close(consolidated["state_dict"], full["state_dict"], atol=0)
    _close(full["state_dict"], runs["main"][0]["full"]["weights"], atol=0)
    for got, want in zip(consolidated["optimizer_states"], full["optimizer_states"]):
        assert got["param_groups"] == want["param_groups"]
        assert got["state"].keys() == want["state"].keys() == {0, 1, 2, 3}
        for index, state in want["state"].items():
            torch.testing.assert_close(got["state"][index]["momentum_buffer"], state["momentum_buffer"])
    # loadable on one process, by fulmen and by Lightning
    model = Wide.load_from_checkpoint(out / "full.ckpt")
    _close(model.state_dict(), full["state_dict"], atol=0)
    model = Wide.load_from_checkpoint(tmp_path / "c.ckpt")
    _close(model.state_dict(), full["state_dict"], atol=0)
    model = Wide.load_from_checkpoint(out / "same_state_sharded.ckpt")  # the directory itself, read whole
    _close(model.state_dict(), full["state_dict"], atol=0)


@pytest.mark.slow
@pytest.mark.parity
def test_lightning_loads_the_full_and_the_consolidated_checkpoint(runs, tmp_path):
    import lightning.pytorch as pl

    class LightningWide(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Wide().net

    out = runs["out"]
    distributed_checkpoint.consolidate(out / "same_state_sharded.ckpt", tmp_path / "c.ckpt")
    full = torch.load(out / "full.ckpt", weights_only=True)
    for path in (out / "full.ckpt", tmp_path / "c.ckpt"):
        model = LightningWide.load_from_checkpoint(path)
        _close(model.state_dict(), full["state_dict"], atol=0)


def _steps(seen_per_rank: list[list[int]], batch: int) -> list[set[int]]:
    """The samples of each optimizer step, from each rank's list (``batch`` samples per rank per step)."""
    count = len(seen_per_rank[0]) // batch
    return [set().union(*(seen[i * batch : (i + 1) * batch] for seen in seen_per_rank)) for i in range(count)]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fsdp", "ddp"])
@pytest.mark.parametrize("processes", [1, 4])
def test_resume_mid_epoch_on_another_number_of_processes(runs, strategy, processes):
    """Written by 2 processes 3 steps into epoch 0, resumed by 1 or 4 with the same global batch: each
    remaining step trains exactly the samples it trained in the uninterrupted run (each once), and the final
    weights are the uninterrupted run's."""
    key = "uninterrupted" if strategy == "fsdp" else "ddp_uninterrupted"
    uninterrupted = [runs["main"][r][key] for r in (0, 1)]
    path = str(runs["two"][0 if strategy == "fsdp" else 1])
    resumed = [r[path] for r in runs[str(processes)]]
    expected = _steps([u["seen"] for u in uninterrupted], 4)[3:]
    got = _steps([r["seen"] for r in resumed], 8 // processes)
    assert got == expected
    assert sum(len(r["seen"]) for r in resumed) == sum(len(s) for s in expected)  # each sample once
    for result in resumed:
        assert result["global_step"] == 2 * STEPS_PER_EPOCH
        _close(result["weights"], uninterrupted[0]["weights"])


@pytest.mark.slow
def test_one_process_checkpoint_shards_resumes_on_two(runs):
    """1 -> 2: the one-process FSDP run (a DistributedSampler of one share) trains as the two-process one, and
    its mid-epoch sharded checkpoint resumes on two processes to the same weights."""
    one_process = runs["1"][0]["one_process"]["weights"]
    reference = runs["main"][0]["uninterrupted"]["weights"]
    _close(one_process, reference)
    for result in runs["2from1"]:
        _close(result[str(runs["one"])]["weights"], reference)


@pytest.mark.slow
def test_a_different_global_batch_is_refused_before_training(runs):
    for results in (runs["1"], runs["4"]):
        message = results[0]["wrong_batch"]
        assert message.startswith("MisconfigurationException") and "global batch of 8" in message


@pytest.mark.slow
def test_two_process_checkpoint_shards_loads_on_one_plain_process(runs):
    """2 -> 1 without any process group: the single-device strategy reads the directory whole, and the plain
    process keeps the two-process run's order for the next epoch too (its own loader would shuffle by itself)."""
    path = runs["two"][0]
    model = Wide()
    trainer = fulmen.Trainer(accelerator="cpu", max_epochs=2, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    trainer.fit(model, indexed_loader(8), ckpt_path=str(path))
    uninterrupted = [runs["main"][r]["uninterrupted"] for r in (0, 1)]
    assert _steps([model.seen], 8) == _steps([u["seen"] for u in uninterrupted], 4)[3:]
    _close({k: v for k, v in model.state_dict().items() if k in uninterrupted[0]["weights"]}, uninterrupted[0]["weights"])


@pytest.mark.slow
def test_sigkill_during_a_sharded_save_leaves_the_previous_checkpoint(runs):
    """Rank 0 is killed while `last` is being replaced (step 4): the step-2 `last` stays complete and
    loadable, the half-written directory is hidden, and ckpt_path="last" resumes from step 2."""
    output = runs["kill_output"]
    directory = runs["out"] / "killed"
    names = sorted(p.name for p in directory.iterdir())
    assert ".last.ckpt.partial" in names, (names, output[-3000:])
    assert "epoch=0-step=4.ckpt" in names and "last.ckpt" in names
    last = distributed_checkpoint.load_consolidated(directory / "last.ckpt")
    assert last["global_step"] == 2
    seen = []

    class Start(fulmen.Callback):
        def on_train_start(self, trainer, pl_module):
            seen.append(trainer.global_step)

    callback = fulmen.callbacks.ModelCheckpoint(dirpath=directory, save_last=True, every_n_train_steps=100)
    trainer = fulmen.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, callbacks=[callback, Start()])  # fmt: skip
    trainer.fit(Wide(), indexed_loader(8), ckpt_path="last")
    assert seen == [2] and trainer.ckpt_path == str(directory / "last.ckpt")


@pytest.mark.parity
@pytest.mark.parametrize("classes", ["one", "list", "with policy"])
def test_the_older_activation_checkpointing_argument_is_deprecated_as_in_lightning(classes):
    from tests.parity.recorded import both, raised_as_lightning

    def program(pl):
        if classes == "one":
            pl.strategies.FSDPStrategy(activation_checkpointing=torch.nn.Linear)
        elif classes == "list":
            pl.strategies.FSDPStrategy(activation_checkpointing=[torch.nn.Linear])
        else:
            pl.strategies.FSDPStrategy(activation_checkpointing=torch.nn.Linear,
                                       activation_checkpointing_policy={torch.nn.Linear})  # fmt: skip

    ours, theirs = both(program, r"activation_checkpointing")
    assert ours.warnings == theirs.warnings and raised_as_lightning(ours, theirs), (ours, theirs)
    assert [category for category, _ in ours.warnings] == ([] if theirs.error else ["LightningDeprecationWarning"])

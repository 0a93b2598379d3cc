"""FSDP and model-parallel runs for tests/strategies/test_fsdp.py, started by torchrun (gloo on the CPU).

Usage: ``torchrun --nproc_per_node=N fsdp_script.py SCENARIO OUTDIR [CHECKPOINTS...]`` (or, for one process,
``python fsdp_script.py ...`` with torchrun's variables RANK, WORLD_SIZE, MASTER_PORT... set). Each rank writes
``OUTDIR/<scenario>-rank<R>.pt`` with what it saw, case by case:

- ``main`` (2 processes): training under FSDP / ModelParallel (weights, gradient-sync blocks, local shard
  sizes), sharded and full checkpoints, an uninterrupted run to compare every resume with, and DDP's.
- ``resume`` (any number): resume each given mid-epoch checkpoint (written by another number of processes)
  with the same global batch of 8; with one process also writes a one-process sharded checkpoint.
- ``--then-kill`` (last): rank 0 is SIGKILLed while a sharded `last` checkpoint is being replaced.
"""

from __future__ import annotations

import math
import os
import signal
import sys

import torch
import torch.distributed as dist
from torch import nn

import fulmen
from fulmen.callbacks import EarlyStopping, ModelCheckpoint
from fulmen.strategies import FSDPStrategy, ModelParallelStrategy
from tests.strategies.ddp_model import RankScore, loader
from tests.strategies.fsdp_model import GAN, TensorParallelWide, Wide, gan_loader, indexed_loader

GLOBAL_BATCH = 8


def trainer(strategy, **kwargs) -> fulmen.Trainer:
    options = {"max_epochs": 2, "enable_checkpointing": False, **kwargs}
    world = int(os.environ["WORLD_SIZE"])
    return fulmen.Trainer(accelerator="cpu", devices=world, strategy=strategy, logger=False,
                          enable_progress_bar=False, enable_model_summary=False, **options)  # fmt: skip


def full_weights(module: nn.Module) -> dict:
    """Every parameter whole, on every rank (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.tensor import DTensor

    if not any(isinstance(p, DTensor) for p in module.parameters()):
        return {k: v.detach().clone() for k, v in module.state_dict().items()}
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=False)
    return {k: v.detach().clone() for k, v in get_model_state_dict(module, options=options).items()}


class ShardSizes(fulmen.Callback):
    """At the second optimizer step: elements this rank holds of parameters, gradients and optimizer state,
    and of the whole model's (the DTensors' global sizes)."""

    def __init__(self):
        self.sizes = None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        from torch.distributed.tensor import DTensor

        if trainer.global_step != 1:
            return
        tensors = [*pl_module.parameters(), *(p.grad for p in pl_module.parameters() if p.grad is not None)]
        tensors += [v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v) and v.dim()]
        local = sum(t.to_local().numel() if isinstance(t, DTensor) else t.numel() for t in tensors)
        self.sizes = {"local": local, "full": sum(t.numel() for t in tensors),
                      "dtensors": all(isinstance(t, DTensor) for t in tensors)}  # fmt: skip


def main(outdir: str) -> dict:
    results = {}
    # accumulation over 2 batches and clipping by the norm of the sharded gradients
    blocked = []
    original = FSDPStrategy.block_backward_sync

    def counting(self):
        blocked.append(1)
        return original(self)

    FSDPStrategy.block_backward_sync = counting
    sizes = ShardSizes()
    model = Wide()
    fit = trainer(FSDPStrategy(auto_wrap_policy={nn.Linear}), accumulate_grad_batches=2, gradient_clip_val=0.5,
                  callbacks=[sizes])  # fmt: skip
    fit.fit(model, indexed_loader(batch_size=4, shuffle=False))
    FSDPStrategy.block_backward_sync = original
    # evaluation and prediction through the same sharded root, after fit
    validated = fit.validate(model, indexed_loader(batch_size=4, shuffle=False), verbose=False)
    predictions = fit.predict(model, indexed_loader(batch_size=4, shuffle=False))
    results["fsdp"] = {"weights": full_weights(model), "blocked": len(blocked), "sizes": sizes.sizes,
                       "global_step": fit.global_step, "val_loss": validated[0]["val_loss"],
                       "predictions": torch.cat(predictions).tolist()}  # fmt: skip
    # bf16-mixed: parameters gathered in bfloat16, gradients reduced in float32, autocast on
    model = Wide()
    trainer(FSDPStrategy(), precision="bf16-mixed").fit(model, indexed_loader(batch_size=4, shuffle=False))
    results["bf16"] = {"weights": full_weights(model)}
    model = Wide()
    trainer("ddp", precision="bf16-mixed").fit(model, indexed_loader(batch_size=4, shuffle=False))
    results["ddp_bf16"] = {"weights": full_weights(model)}
    # manual optimization with two optimizers and toggle_model(sync_grad=...) accumulating over two batches
    # (the generator and the discriminator become FSDP units of their own: see fsdp._shard_children)
    gan = GAN()
    trainer("fsdp").fit(gan, gan_loader(batch_size=4))
    results["gan"] = {"weights": full_weights(gan)}
    # tensor parallel size 2 on the 2-layer MLP: both ranks see the same batches
    model = TensorParallelWide()
    fit = trainer(ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=2))
    fit.fit(model, indexed_loader(batch_size=GLOBAL_BATCH, shuffle=False))
    results["tp"] = {"weights": full_weights(model), "mesh": tuple(fit.strategy.device_mesh.shape)}
    # the other sharding strategies, CPU offload and activation checkpointing (same numbers, other memory use)
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    for case, strategy in (("SHARD_GRAD_OP", FSDPStrategy(sharding_strategy="SHARD_GRAD_OP",
                                                          auto_wrap_policy=ModuleWrapPolicy({nn.Linear}))),
                           ("NO_SHARD", FSDPStrategy(sharding_strategy="NO_SHARD")),
                           ("HYBRID_SHARD", FSDPStrategy(sharding_strategy="HYBRID_SHARD", device_mesh=(1, 2))),
                           ("cpu_offload", FSDPStrategy(cpu_offload=True, activation_checkpointing_policy={nn.Linear},
                                                        auto_wrap_policy={nn.Linear}))):  # fmt: skip
        model = Wide()
        fit = trainer(strategy)
        fit.fit(model, indexed_loader(batch_size=4, shuffle=False))
        results[case] = {"weights": full_weights(model), "mesh": tuple(fit.strategy.device_mesh.shape)}
    # a monitored value that differs between ranks (no sync_dist): the ranks agree on rank 0's, so they save
    # (every rank writes its shards) under the same names
    every_epoch = ModelCheckpoint(dirpath=f"{outdir}/agreed", monitor="score", mode="max", save_top_k=1)
    fit = trainer(FSDPStrategy(state_dict_type="sharded"), max_epochs=3, callbacks=[every_epoch],
                  enable_checkpointing=True)  # fmt: skip
    fit.fit(RankScore(), loader(batch_size=4))
    results["agreed"] = {"best": every_epoch.best_model_path, "score": float(every_epoch.best_model_score)}
    # a model created on the meta device, materialised already sharded
    fit = trainer("fsdp", max_epochs=1)
    with fit.init_module(empty_init=True):
        model = Wide()
    on_meta = all(p.is_meta for p in model.parameters())
    fit.fit(model, indexed_loader(batch_size=4, shuffle=False))
    local = sum(p.to_local().numel() for p in model.parameters())
    results["meta"] = {"on_meta": on_meta, "local": local, "full": sum(p.numel() for p in model.parameters()),
                       "loss": float(fit.callback_metrics["loss_epoch"])}  # fmt: skip
    # stop decisions agreed between ranks (EarlyStopping that would stop on one rank only)
    fit = trainer("fsdp", max_epochs=5, callbacks=[EarlyStopping("score", patience=1)])
    fit.fit(RankScore(), loader(batch_size=4))
    results["early_stopping"] = {"current_epoch": fit.current_epoch, "global_step": fit.global_step}
    results["batch_size"] = tuned_batch_size()
    results.update(checkpoints(outdir))
    return results


def tuned_batch_size() -> dict:
    """The batch-size finder before an FSDP fit, rank 1 running out of memory sooner (above 20) than rank 0
    (above 40): both agree on 16, and the fit that follows shards and trains the restored model."""
    from fulmen.tuner import Tuner
    from tests.tuner.oom_model import OOMModel

    class RankLimited(OOMModel):
        def training_step(self, batch, batch_idx):
            self.fits_up_to = 40 if dist.get_rank() == 0 else 20
            return super().training_step(batch, batch_idx)

    model = RankLimited()
    fit = trainer("fsdp", max_epochs=1, limit_train_batches=2)
    size = Tuner(fit).scale_batch_size(model)
    fit.fit(model)
    return {"size": size, "attribute": model.batch_size, "sharded": type(model.net.weight).__name__}


def checkpoints(outdir: str) -> dict:
    results = {}
    # the run every resume is compared with; sharded checkpoints every 3 steps (8 steps an epoch)
    model = Wide()
    every_3 = ModelCheckpoint(dirpath=f"{outdir}/sharded", every_n_train_steps=3, save_top_k=-1, save_last=True)
    trainer(FSDPStrategy(state_dict_type="sharded"), callbacks=[every_3], enable_checkpointing=True).fit(
        model, indexed_loader(batch_size=4)
    )
    results["uninterrupted"] = {"weights": full_weights(model), "seen": model.seen}
    # the same number of processes resumes a sharded checkpoint exactly
    model = Wide()
    fit = trainer(FSDPStrategy(state_dict_type="sharded"))
    fit.fit(model, indexed_loader(batch_size=4), ckpt_path=f"{outdir}/sharded/epoch=0-step=3.ckpt")
    results["sharded_resumed"] = {"weights": full_weights(model), "seen": model.seen, "global_step": fit.global_step}
    # a full checkpoint (one file from rank 0) and a sharded one of the same state
    model = Wide()
    fit = trainer(FSDPStrategy(state_dict_type="full"), max_epochs=1)
    fit.fit(model, indexed_loader(batch_size=4))
    fit.save_checkpoint(f"{outdir}/full.ckpt")
    fit.strategy.state_dict_type = "sharded"
    fit.save_checkpoint(f"{outdir}/same_state_sharded.ckpt")
    results["full"] = {"weights": full_weights(model)}
    # DDP's mid-epoch checkpoints, for resuming on another number of processes
    model = Wide()
    every_3 = ModelCheckpoint(dirpath=f"{outdir}/ddp", every_n_train_steps=3, save_top_k=-1)
    trainer("ddp", callbacks=[every_3], enable_checkpointing=True).fit(model, indexed_loader(batch_size=4))
    results["ddp_uninterrupted"] = {"weights": full_weights(model), "seen": model.seen}
    return results


def resume(outdir: str, checkpoints: list[str], refusal: bool = True) -> dict:
    world = int(os.environ["WORLD_SIZE"])
    results = {}
    for path in checkpoints:
        strategy = "ddp" if "/ddp/" in path else FSDPStrategy(state_dict_type="sharded")
        model = Wide()
        fit = trainer(strategy)
        fit.fit(model, indexed_loader(batch_size=GLOBAL_BATCH // world), ckpt_path=path)
        results[path] = {"weights": full_weights(model), "seen": model.seen, "global_step": fit.global_step}
    if world == 4:  # 2-D: tensor parallel pairs, data parallel across them (batch 4 per data-parallel rank)
        model = TensorParallelWide()
        fit = trainer(ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=2))
        fit.fit(model, indexed_loader(batch_size=GLOBAL_BATCH // 2, shuffle=False))
        results["2d"] = {"weights": full_weights(model), "mesh": tuple(fit.strategy.device_mesh.shape)}
    if world == 1:  # a one-process sharded checkpoint, for resuming on two
        model = Wide()
        every_3 = ModelCheckpoint(dirpath=f"{outdir}/one", every_n_train_steps=3, save_top_k=-1)
        trainer(FSDPStrategy(state_dict_type="sharded"), callbacks=[every_3], enable_checkpointing=True).fit(
            model, indexed_loader(batch_size=GLOBAL_BATCH)
        )
        results["one_process"] = {"weights": full_weights(model)}
    # last (a failed run leaves the process group): a wrong global batch is refused before training
    if not refusal:
        return results
    try:
        trainer(FSDPStrategy(state_dict_type="sharded")).fit(Wide(), indexed_loader(batch_size=GLOBAL_BATCH // world + 1),
                                                            ckpt_path=checkpoints[0])  # fmt: skip
        results["wrong_batch"] = None
    except Exception as error:
        results["wrong_batch"] = f"{type(error).__name__}: {error}"
    return results


def kill(outdir: str) -> None:
    """Sharded checkpoints (and `last`) every 2 steps; rank 0 dies (SIGKILL) while `last` is being replaced
    at step 4: after every shard and DCP's index are written, before the directory is complete."""
    import torch.distributed.checkpoint as dcp

    saves = []
    real_save = dcp.save

    def dying_save(*args, **kwargs):
        saves.append(1)
        result = real_save(*args, **kwargs)
        if len(saves) == 4 and dist.get_rank() == 0:  # saves: step 2, last, step 4, last
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    dcp.save = dying_save
    every_2 = ModelCheckpoint(dirpath=f"{outdir}/killed", every_n_train_steps=2, save_top_k=-1, save_last=True)
    trainer(FSDPStrategy(state_dict_type="sharded"), callbacks=[every_2], enable_checkpointing=True,
            max_epochs=1).fit(Wide(), indexed_loader(batch_size=4))  # fmt: skip


if __name__ == "__main__":
    scenario, outdir, *rest = sys.argv[1:]
    rank = int(os.environ["RANK"])
    then_kill = "--then-kill" in rest
    rest = [arg for arg in rest if arg != "--then-kill"]
    results = main(outdir) if scenario == "main" else resume(outdir, rest, refusal=not then_kill)
    assert not any(isinstance(v, float) and math.isnan(v) for r in results.values() if isinstance(r, dict)
                   for v in r.values())  # fmt: skip
    torch.save(results, f"{outdir}/{scenario}-rank{rank}.pt")
    if then_kill:  # last: rank 0 dies in it
        dist.barrier()
        kill(outdir)

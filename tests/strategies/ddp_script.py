"""Trains the test module under DDP; run by tests/strategies/test_ddp.py through torchrun (2 processes, gloo).

Usage: ``torchrun --nproc_per_node=2 ddp_script.py OUTDIR``. Each rank writes OUTDIR/rank<R>.pt with its
final weights, the logged epoch values it sees and the number of samples it trained on, for each case.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys

import torch

import fulmen
from tests.strategies.ddp_model import (
    CASES,
    GAN,
    Model,
    RankScore,
    StopsOnOneRank,
    gan_loader,
    loader,
    seeded_model_class,
)

# two processes: two devices on one node, or (a simulated two-machine run) one device on each of two nodes
LAYOUT = {
    "devices": int(os.environ.get("TEST_DEVICES", 2)),
    "num_nodes": int(os.environ.get("TEST_NUM_NODES", 1)),
}


def ddp_trainer(**kwargs) -> fulmen.Trainer:
    options = {"max_epochs": 2, "enable_checkpointing": False, "strategy": "ddp", **kwargs}
    return fulmen.Trainer(accelerator="cpu", **LAYOUT, logger=False, enable_progress_bar=False,
                          enable_model_summary=False, **options)  # fmt: skip


def main(outdir: str) -> None:
    from fulmen.strategies.ddp import DDPStrategy

    blocked = []
    original = DDPStrategy.block_backward_sync

    def counting(self):
        blocked.append(1)
        return original(self)

    DDPStrategy.block_backward_sync = counting  # how often gradient sync was held back (no_sync)

    reductions = []  # gradient all-reduces DDP actually ran (one bucket per backward for these small models)
    setup = DDPStrategy.setup

    def counting_setup(self, trainer):
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        setup(self, trainer)

        def hook(state, bucket):
            reductions.append(1)
            return allreduce_hook(state, bucket)

        self.model.register_comm_hook(None, hook)

    DDPStrategy.setup = counting_setup
    results = {}
    for case, trainer_kwargs in CASES.items():
        blocked.clear()
        reductions.clear()
        model = Model()
        trainer = ddp_trainer(**trainer_kwargs)
        trainer.fit(model, loader(batch_size=4))
        results[case] = {
            "weights": {k: v.detach().clone() for k, v in model.state_dict().items()},
            "loss_epoch": float(trainer.callback_metrics["loss_epoch"]),
            "samples": model.samples,
            "global_step": trainer.global_step,
            "world_size": trainer.world_size,
            "node_rank": trainer.node_rank,
            "num_nodes": trainer.num_nodes,
            "strategy": type(trainer.strategy).__name__,
            "launcher": trainer.strategy.cluster_layout.launcher,
            "no_sync_batches": len(blocked),
            "reductions": len(reductions),
        }
    rank = torch.distributed.get_rank()
    if os.environ.get("TEST_ONLY_CASES"):  # another way of starting the job: the cases show it trains as one
        torch.save(results, f"{outdir}/rank{rank}.pt")
        return
    # a shuffled training loader: DistributedSampler(shuffle=True), reshuffled each epoch (compared with Lightning)
    model = Model()
    ddp_trainer().fit(model, loader(batch_size=4, shuffle=True))
    results["shuffled"] = {"weights": model.state_dict()}
    # seeded: dropout, shuffled training and validation loaders, the sanity check on (compared with Lightning)
    fulmen.seed_everything(42, verbose=False)
    seeded = seeded_model_class(fulmen)()
    ddp_trainer().fit(seeded, loader(batch_size=4, shuffle=True), loader(batch_size=4, shuffle=True))
    results["seeded"] = {"weights": seeded.state_dict()}
    # checkpoint + resume: rank 0 writes the mid-epoch checkpoints, every rank resumes from one
    every_5 = fulmen.callbacks.ModelCheckpoint(dirpath=f"{outdir}/ckpt", every_n_train_steps=5, save_top_k=-1)
    ddp_trainer(callbacks=[every_5], enable_checkpointing=True).fit(Model(), loader(batch_size=4))
    resumed = Model()
    trainer = ddp_trainer()
    trainer.fit(resumed, loader(batch_size=4), ckpt_path=f"{outdir}/ckpt/epoch=0-step=5.ckpt")
    results["resumed"] = {"weights": resumed.state_dict(), "global_step": trainer.global_step}
    # manual optimization: seed 001's GAN, two optimizers, toggle_model(sync_grad=False) while accumulating;
    # the generator's backward leaves the frozen discriminator unused, hence find_unused_parameters
    blocked.clear()
    reductions.clear()
    gan = GAN()
    trainer = ddp_trainer(strategy="ddp_find_unused_parameters_true")
    trainer.fit(gan, gan_loader(batch_size=4))
    results["gan"] = {"weights": gan.state_dict(), "global_step": trainer.global_step,
                      "no_sync_blocks": len(blocked), "reductions": len(reductions), "d_loss": float(trainer.callback_metrics["d_loss"])}  # fmt: skip
    # stop decisions agreed between ranks: a should_stop only rank 1 sets mid-epoch, and an EarlyStopping that
    # would stop on rank 1 only; both ranks must stop together (or one would wait for the other forever)
    for case, model, callbacks in (("local_stop", StopsOnOneRank(), []),
                                   ("early_stopping", RankScore(), [fulmen.callbacks.EarlyStopping("score", patience=1)])):  # fmt: skip
        trainer = ddp_trainer(max_epochs=5, callbacks=callbacks)
        trainer.fit(model, loader(batch_size=4))
        results[case] = {"global_step": trainer.global_step, "current_epoch": trainer.current_epoch,
                         "should_stop": trainer.should_stop}  # fmt: skip
    results["collectives"] = collectives(trainer.strategy)
    results["module_all_gather"] = module_all_gather(model)
    results["prediction_writer"] = predict_with_writer()
    results["batch_size"] = tuned_batch_size()
    results["lr_find"] = tuned_learning_rate()
    results["rank_zero"] = rank_zero_run(outdir)
    results["outdir"] = outdir
    torch.save(results, f"{outdir}/rank{rank}.pt")


def tuned_batch_size() -> dict:
    """The batch-size finder under DDP, where rank 1 runs out of memory sooner (above 20) than rank 0 (above
    40): the ranks agree on every trial, so both choose 16."""
    from fulmen.tuner import Tuner
    from tests.tuner.oom_model import OOMModel

    class RankLimited(OOMModel):
        def training_step(self, batch, batch_idx):
            self.fits_up_to = 40 if torch.distributed.get_rank() == 0 else 20
            return super().training_step(batch, batch_idx)

    model = RankLimited()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    size = Tuner(ddp_trainer()).scale_batch_size(model)
    same = all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    return {
        "size": size,
        "attribute": model.batch_size,
        "weights_restored": same,
        "tried": sorted(set(model.seen)),
    }


def tuned_learning_rate() -> float:
    """The learning-rate finder under DDP, each rank seeing other data: all take rank 0's suggestion."""
    from fulmen.tuner import Tuner

    class WithLR(Model):
        def __init__(self):
            super().__init__()
            self.lr = 0.3

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    rank = int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", 0)))
    model = WithLR()
    data = loader(batch_size=4)
    if rank:  # another rank, other data: its own test would suggest another rate
        x, y = data.dataset.tensors
        data = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(x.flip(0) * 3, y.flip(0)), batch_size=4
        )
    Tuner(ddp_trainer()).lr_find(model, data, min_lr=1e-4, max_lr=10.0, num_training=40)
    return model.lr


def collectives(strategy) -> dict:
    """The strategy's collectives, each rank contributing its rank (a process group is still up here)."""
    rank = strategy.global_rank
    value = torch.tensor([float(rank + 1)])
    strategy.barrier("collectives")
    return {
        "broadcast": strategy.broadcast({"from": rank}, src=0),
        "all_gather": strategy.all_gather(value).tolist(),
        "mean": strategy.reduce(value).tolist(), "sum": strategy.reduce(value, reduce_op="sum").tolist(),
        "max": strategy.reduce(value, reduce_op="max").tolist(),
        "any": strategy.reduce_boolean_decision(rank == 1, all=False),
        "all": strategy.reduce_boolean_decision(rank == 1, all=True),
    }  # fmt: skip


def module_all_gather(model: fulmen.LightningModule) -> dict:
    """LightningModule.all_gather on a collection, and with sync_grads (the gradient flows back to every rank)."""
    rank = model.global_rank
    gathered = model.all_gather({"rank": torch.tensor([float(rank)]), "number": rank + 10})
    x = torch.tensor([rank + 1.0], requires_grad=True)
    (model.all_gather(x, sync_grads=True) * torch.tensor([[1.0], [3.0]])).sum().backward()
    return {"rank": gathered["rank"].tolist(), "number": gathered["number"].tolist(), "grad": x.grad.tolist()}


class Predicting(Model):
    def predict_step(self, batch, batch_idx):
        return self.net(batch[0])


class IndexWriter(fulmen.callbacks.BasePredictionWriter):
    def __init__(self) -> None:
        super().__init__("batch_and_epoch")
        self.batches: list = []
        self.epoch: tuple | None = None

    def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
        self.batches.append((list(batch_indices), prediction.shape[0]))

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        self.epoch = (len(predictions), batch_indices)


def predict_with_writer() -> dict:
    """A prediction writer under DDP: each rank writes its share, with the dataset indices of its samples. 63
    samples: two ranks cannot share them evenly, and no sample may be predicted twice."""
    writer = IndexWriter()
    data = torch.utils.data.Subset(loader(batch_size=5).dataset, range(63))
    uneven = torch.utils.data.DataLoader(data, batch_size=5)
    out = ddp_trainer(callbacks=[writer]).predict(Predicting(), uneven, return_predictions=False)
    return {"batches": writer.batches, "epoch": writer.epoch, "returned": out}


def rank_zero_run(outdir: str) -> dict:
    """Loggers, progress bar, model summary, trainer.print and save_checkpoint on every rank; what each rank
    printed is captured (torchrun mixes both ranks' output otherwise)."""
    from fulmen.loggers import CSVLogger, MLFlowLogger, TensorBoardLogger, WandbLogger

    rank = torch.distributed.get_rank()
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", WANDB_DISABLE_GIT="true")
    loggers = [CSVLogger(f"{outdir}/logs", version=0), TensorBoardLogger(f"{outdir}/tb", version=0),
               MLFlowLogger("ddp", tracking_uri=f"sqlite:///{outdir}/mlflow.db"),
               WandbLogger(project="ddp", save_dir=f"{outdir}/wb")]  # fmt: skip
    trainer = fulmen.Trainer(accelerator="cpu", **LAYOUT, strategy="ddp", max_epochs=2, logger=loggers,
                             log_every_n_steps=2, enable_checkpointing=False)  # fmt: skip
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        trainer.fit(Model(), loader(batch_size=4))
        trainer.print("hello from trainer.print")
        trainer.save_checkpoint(f"{outdir}/manual_rank{rank}.ckpt")
    if rank == 0:
        import wandb

        wandb.finish()
    return {"stdout": out.getvalue(), "stderr": err.getvalue(), "pid": os.getpid(),
            "mlflow_run": loggers[2].version, "wandb_run": loggers[3].version}  # fmt: skip


class KillRank(fulmen.Callback):
    """SIGKILL for one rank in the middle of training: no exception, no clean-up, as when a machine dies."""

    def __init__(self, rank: int, batch: int) -> None:
        self.rank, self.batch = rank, batch

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_rank == self.rank and batch_idx == self.batch:
            os.kill(os.getpid(), signal.SIGKILL)


def killed_run(outdir: str, rank: int) -> None:
    every_2 = fulmen.callbacks.ModelCheckpoint(dirpath=f"{outdir}/ckpt", every_n_train_steps=2, save_top_k=-1)
    ddp_trainer(callbacks=[every_2, KillRank(rank, batch=5)], enable_checkpointing=True).fit(
        Model(), loader(4)
    )


def elastic_run(outdir: str) -> None:
    """Under torchrun --max-restarts=1: the first attempt loses rank 1 (SIGKILL) mid-epoch, torchrun restarts
    both ranks, and the second attempt resumes from the last checkpoint (ckpt_path="last")."""
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    every_3 = fulmen.callbacks.ModelCheckpoint(
        dirpath=f"{outdir}/ckpt", every_n_train_steps=3, save_last=True
    )
    callbacks = [every_3] if attempt else [every_3, KillRank(1, batch=5)]
    model = Model()
    trainer = ddp_trainer(callbacks=callbacks, enable_checkpointing=True)
    trainer.fit(model, loader(batch_size=4), ckpt_path="last" if attempt else None)
    torch.save({"attempt": attempt, "weights": model.state_dict(), "global_step": trainer.global_step,
                "resumed_from": trainer.ckpt_path}, f"{outdir}/elastic_rank{trainer.global_rank}.pt")  # fmt: skip


def exit_after_collectives() -> None:
    """Collectives right up to the end of the script: the interpreter shuts down while gloo's worker threads
    may still be releasing the last tensors (a run that had succeeded once aborted there, SIGABRT)."""
    trainer = ddp_trainer(max_epochs=1)
    trainer.fit(Model(), loader(batch_size=4))
    for _ in range(300):
        trainer.strategy.reduce(torch.ones(3), reduce_op="sum")


if __name__ == "__main__":
    if "TEST_EXIT" in os.environ:
        exit_after_collectives()
    elif "TEST_ELASTIC" in os.environ:
        elastic_run(sys.argv[1])
    elif "TEST_KILL_RANK" in os.environ:
        killed_run(sys.argv[1], int(os.environ["TEST_KILL_RANK"]))
    else:
        main(sys.argv[1])

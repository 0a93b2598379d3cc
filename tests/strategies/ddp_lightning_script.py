"""The DDP cases of ddp_script.py under Lightning (the oracle): ``torchrun --nproc_per_node=2
ddp_lightning_script.py OUTDIR`` writes OUTDIR/lightning_rank<R>.pt with each case's final weights."""

from __future__ import annotations

import os
import sys
import warnings

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, DistributedSampler

from tests.strategies.ddp_model import CASES, gan_loader, loader, model_classes, seeded_model_class


def main(outdir: str) -> None:
    warnings.filterwarnings("ignore")
    Model, GAN = model_classes(pl)
    options = {"accelerator": "cpu", "devices": 2, "max_epochs": 2, "logger": False, "enable_checkpointing": False,
               "enable_progress_bar": False, "enable_model_summary": False}  # fmt: skip
    results = {}
    # Lightning shuffles every training loader it gives a DistributedSampler; fulmen keeps shuffle=False. The
    # unshuffled cases pass the sampler fulmen injects, so both frameworks see the same shards.
    unshuffled = {**options, "use_distributed_sampler": False}
    for case, kwargs in CASES.items():
        model = Model()
        pl.Trainer(strategy="ddp", **unshuffled, **kwargs).fit(model, sharded(loader(batch_size=4)))
        results[case] = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model = Model()  # shuffled: both inject DistributedSampler(shuffle=True, seed=0) and call set_epoch
    pl.Trainer(strategy="ddp", **options).fit(model, loader(batch_size=4, shuffle=True))
    results["shuffled"] = model.state_dict()
    pl.seed_everything(42, verbose=False)
    seeded = seeded_model_class(pl)()
    pl.Trainer(strategy="ddp", **options).fit(seeded, loader(batch_size=4, shuffle=True), loader(batch_size=4, shuffle=True))
    results["seeded"] = seeded.state_dict()
    gan = GAN()
    try:
        pl.Trainer(strategy="ddp_find_unused_parameters_true", **unshuffled).fit(gan, sharded(gan_loader(4)))
        results["gan"] = gan.state_dict()
    except RuntimeError as err:  # recorded: the test says what Lightning does with this module
        results["gan"] = f"{type(err).__name__}: {err}"
    torch.save(results, f"{outdir}/lightning_rank{torch.distributed.get_rank()}.pt")


def sharded(data: DataLoader) -> DataLoader:
    shard = DistributedSampler(data.dataset, num_replicas=int(os.environ["WORLD_SIZE"]), rank=int(os.environ["RANK"]),
                               shuffle=False)  # fmt: skip
    return DataLoader(data.dataset, batch_size=data.batch_size, sampler=shard)


if __name__ == "__main__":
    main(sys.argv[1])

"""Resuming an epoch on another number of processes: the epoch's global order and how the rest of it is shared out.

The data position of a checkpoint is also kept as a count of samples of the epoch's *global* order (the order a
DistributedSampler shares out: sample ``j`` of rank ``r`` is global position ``j * replicas + r``). A run on a
different number of processes redraws that global order and shares out what is left of it, so each remaining
sample is trained once, in the same order, provided the global batch (per-process batch x processes) is
unchanged (:func:`resharded_epoch_loader`); every later epoch keeps the order of the run that wrote the
checkpoint (:class:`OrderKeepingSampler`, :func:`keep_order`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DistributedSampler, RandomSampler, Sampler, SequentialSampler

from fulmen.overrides.distributed import DistributedSamplerWrapper, UnrepeatedDistributedSamplerWrapper
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.loader_rebuild import rebuild_dataloader
from fulmen.utilities.rank_zero import rank_zero_info


def data_layout(loader: Any) -> dict[str, Any] | None:
    """How the training data is shared out: enough to redraw the epoch's global order on any number of
    processes (``None``: a loader whose order fulmen cannot redraw, e.g. an iterable dataset)."""
    batch_size = getattr(loader, "batch_size", None)
    sampler = getattr(loader, "sampler", None)
    if not batch_size or getattr(loader, "batch_sampler", None) is None:
        return None
    if isinstance(sampler, (DistributedSamplerWrapper, UnrepeatedDistributedSamplerWrapper)):
        # shares of the user's own sampler's draws: its order is its own, not one fulmen can redraw
        return {"replicas": sampler.num_replicas, "batch_size": batch_size, "distributed": False}
    if isinstance(sampler, DistributedSampler):
        return {"replicas": sampler.num_replicas, "batch_size": batch_size, "distributed": True,
                "shuffle": sampler.shuffle, "seed": sampler.seed, "drop_last": sampler.drop_last,
                "samples": len(sampler.dataset),  # type: ignore[arg-type]
                "order_replicas": getattr(sampler, "order_replicas", sampler.num_replicas)}  # fmt: skip
    return {"replicas": 1, "batch_size": batch_size, "distributed": False}


class _PositionedSampler(Sampler[int]):
    """``skipped`` placeholder indices (never loaded: the fetcher drops those batches in the batch sampler),
    then this process's share of the rest of the epoch."""

    def __init__(self, skipped: int, indices: list[int]) -> None:
        self.skipped, self.indices = skipped, indices

    def __iter__(self) -> Iterator[int]:
        first = self.indices[0] if self.indices else 0
        yield from [first] * self.skipped
        yield from self.indices

    def __len__(self) -> int:
        return self.skipped + len(self.indices)


def global_order(dataset: Any, replicas: int, shuffle: bool, seed: int, drop_last: bool, epoch: int) -> list[int]:
    """The global order of ``epoch`` under ``replicas`` DistributedSampler shares, interleaved (padding and
    dropped tail included: they depend on the number of shares)."""
    shares = []
    for rank in range(replicas):
        sampler: DistributedSampler[Any] = DistributedSampler(
            dataset, num_replicas=replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last
        )
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    return [index for position in zip(*shares) for index in position]


def _global_order(saved: dict[str, Any], dataset: Any, epoch: int) -> list[int]:
    """The interrupted run's global order for ``epoch``."""
    return global_order(dataset, order_replicas(saved), bool(saved["shuffle"]), int(saved["seed"]),
                        bool(saved["drop_last"]), epoch)  # fmt: skip


def order_replicas(layout: dict[str, Any]) -> int:
    """The number of shares a run's order was drawn for (its own processes, unless it kept another's)."""
    return int(layout.get("order_replicas", layout["replicas"]))


class OrderKeepingSampler(DistributedSampler[int]):
    """This process's share of the global order a run on ``order_replicas`` processes draws each epoch.

    A run resumed on another number of processes (or on one, without a distributed strategy) keeps the order
    of the run that wrote the checkpoint for every later epoch, so with the same global batch each optimizer
    step trains the samples it would have."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int, shuffle: bool, seed: int, drop_last: bool,
                 order_replicas: int) -> None:  # fmt: skip
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        self.order_replicas = order_replicas
        n = len(dataset)
        per_share = n // order_replicas if drop_last else -(-n // order_replicas)
        self.num_samples = -(-per_share * order_replicas // num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self) -> Iterator[int]:
        order = global_order(self.dataset, self.order_replicas, self.shuffle, self.seed, self.drop_last, self.epoch)
        order += order[: self.total_size - len(order)]  # share out evenly, as a DistributedSampler pads
        return iter(order[self.rank : self.total_size : self.num_replicas])


def keep_order(loader: Any, saved: dict[str, Any] | None) -> Any:
    """``loader`` drawing the order of the run that wrote a checkpoint with data layout ``saved``, when that
    order came from a DistributedSampler over another number of shares (``loader`` itself otherwise)."""
    current = data_layout(loader)
    if saved is None or current is None or not saved["distributed"]:
        return loader
    wanted = order_replicas(saved)
    if current["distributed"] and order_replicas(current) == wanted:
        return loader
    sampler = loader.sampler
    if not current["distributed"] and not isinstance(sampler, (RandomSampler, SequentialSampler)):
        return loader  # the user's own sampler: its order is theirs
    dataset = loader.dataset
    if len(dataset) != int(saved["samples"]):
        return loader  # another data set: no order to keep
    replicas, rank = (sampler.num_replicas, sampler.rank) if current["distributed"] else (1, 0)
    keeper = OrderKeepingSampler(dataset, replicas, rank, bool(saved["shuffle"]), int(saved["seed"]),
                                 bool(saved["drop_last"]), wanted)  # fmt: skip
    rank_zero_info(
        f"The checkpoint's data order was drawn for {wanted} process(es); this run ({replicas}) keeps it for every "
        "epoch, so that each optimizer step trains the samples it would have in the run that wrote it."
    )
    return rebuild_dataloader(loader, sampler=keeper)


def resharded(saved: dict[str, Any] | None, current: dict[str, Any] | None) -> bool:
    """Whether a checkpoint with data layout ``saved`` was written on another number of processes (or drawn
    its order for another number) than this run's layout ``current``."""
    if saved is None or current is None:
        return False
    same = (saved["replicas"], saved["distributed"]) == (current["replicas"], current["distributed"]) and (
        not saved["distributed"] or order_replicas(saved) == order_replicas(current)
    )
    return not same


def resharded_epoch_loader(
    loader: Any, saved: dict[str, Any] | None, current: dict[str, Any] | None, epoch: int, batch_idx: int,
    accumulate_grad_batches: int,
) -> tuple[Any, int]:  # fmt: skip
    """``(None, batch_idx)`` when the checkpoint's data layout ``saved`` is the layout ``current`` of this run's
    training ``loader`` (the batches are skipped as usual); otherwise a loader for the rest of the interrupted
    epoch on this run's processes, and the batches of this run that the samples already trained make
    (``batch_idx`` when each batch holds as many samples across the processes as the interrupted run's;
    otherwise the steps done times this run's ``accumulate_grad_batches``)."""
    if batch_idx == 0 or not resharded(saved, current):
        return None, batch_idx
    assert saved is not None and current is not None
    old, new = int(saved["replicas"]), int(current["replicas"])
    where = f"The checkpoint was written {batch_idx} batches into epoch {epoch} by {old} process(es)"
    if not saved["distributed"]:
        raise MisconfigurationException(
            f"{where}, whose order came from its DataLoader's own sampler; {new} processes cannot redraw it. "
            "Resume that run on one process, or from a checkpoint at an epoch end. (A run that may move to "
            "another number of processes can start under a launcher with strategy='ddp' or 'fsdp' even on one "
            "device, e.g. `torchrun --nproc_per_node=1 train.py`: its order is then a DistributedSampler's, "
            "which any number of processes can redraw. Started without a launcher, one device trains as a plain "
            "process.)"
        )
    per_batch, new_per_batch = int(saved["batch_size"]) * old, int(current["batch_size"]) * new
    _check_global_batch(saved, current, where, per_batch, new_per_batch, batch_idx, accumulate_grad_batches)
    done = batch_idx * per_batch  # samples of the epoch's global order already trained
    dataset = loader.dataset
    if len(dataset) != int(saved["samples"]):
        raise MisconfigurationException(
            f"{where} on a dataset of {saved['samples']} samples; this run's has {len(dataset)}."
        )
    remaining = _global_order(saved, dataset, epoch)[done:]
    if len(remaining) % new:
        raise MisconfigurationException(
            f"{where}: the {len(remaining)} samples left of the epoch do not share out evenly over {new} "
            f"processes (each would need an equal number to keep the processes in step). Resume on a number of "
            "processes that divides it, or from a checkpoint at an epoch end."
        )
    rank = int(getattr(loader.sampler, "rank", 0))
    mine = remaining[rank::new]
    new_batch_idx = done // new_per_batch
    sampler = _PositionedSampler(new_batch_idx * int(current["batch_size"]), mine)
    rank_zero_info(
        f"Resuming epoch {epoch} on {new} process(es) (written by {old}): {len(remaining)} samples of its global "
        "order left, shared out in the same order."
    )
    return rebuild_dataloader(loader, sampler=sampler), new_batch_idx


def _check_global_batch(
    saved: dict[str, Any], current: dict[str, Any], where: str, per_batch: int, new_per_batch: int, batch_idx: int,
    new_accumulate: int,
) -> None:  # fmt: skip
    """Refuse to go on unless each remaining optimizer step trains the samples it would have in the run that
    wrote the checkpoint (``per_batch`` / ``new_per_batch``: samples per batch across the processes)."""
    new = int(current["replicas"])
    accumulate = int(saved.get("accumulate", 1))
    step, new_step = per_batch * accumulate, new_per_batch * new_accumulate
    done = batch_idx * per_batch
    if per_batch != new_per_batch and (step != new_step or done % new_per_batch):
        fits = per_batch % new == 0
        advice = (f"set the DataLoader's batch_size={per_batch // new} per process" if fits else
                  f"use a number of processes that divides {per_batch}")  # fmt: skip
        raise MisconfigurationException(
            f"{where} with a global batch of {step} samples per optimizer step ({saved['batch_size']} per process and batch, "
            f"{accumulate} batch(es) per step); this run has {new} processes x batch_size={current['batch_size']} x "
            f"{new_accumulate} = {new_step}. Resuming mid-epoch on another number of processes keeps the samples "
            f"of each optimizer step, so that each remaining step trains the samples it would have: {advice}, or "
            f"keep the step's samples with the GlobalBatchSize({step}) callback (it sets the accumulation), or "
            "resume from a checkpoint at an epoch end."
        )

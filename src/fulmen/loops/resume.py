"""Exact resume: what a checkpoint holds of the fit loop, and how a run continues from it.

The file keeps Lightning's ``loops`` progress counters (so files move both ways between fulmen and
Lightning) and adds fulmen's exact-resume state under ``loops.fit_loop.state_dict.fulmen`` (Lightning ignores
it): where in the loop the file was written (:class:`LoopPhase`), the RNG states at that point and at the start
of the epoch, gradients of an open accumulation window, the metrics a plateau scheduler still has to read, the
epoch's metric aggregates and the state of data that keeps its own position (``loops/loader_state.py``). The
fit loop runs the interrupted epoch like any other; this module has each part restore its state once the
epoch's start hooks ran (:func:`restore_epoch`): RNG restored, the data read on from its position or the
epoch's order redrawn from the epoch-start RNG with the batches already trained skipped without loading them.

The data position is also kept as a count of samples of the epoch's *global* order (the order a
DistributedSampler shares out: sample ``j`` of rank ``r`` is global position ``j * replicas + r``). A run on a
different number of processes redraws that global order and shares out what is left of it, so each remaining
sample is trained once, in the same order, provided the global batch (per-process batch x processes) is
unchanged (see :func:`_resharded_epoch_loader`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from torch.utils.data import DistributedSampler, RandomSampler, Sampler, SequentialSampler

from fulmen.loops.loader_state import data_parts
from fulmen.overrides.distributed import DistributedSamplerWrapper, UnrepeatedDistributedSamplerWrapper
from fulmen.runtime.rng import capture_rng, restore_rng
from fulmen.runtime.state import FitProgress, LoopPhase
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.loader_rebuild import rebuild_dataloader
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fulmen.loops.fetchers import PrefetchIterator
    from fulmen.loops.fit_loop import FitLoop

_MID_EPOCH = (LoopPhase.BATCH, LoopPhase.VALIDATION, LoopPhase.BETWEEN)


# -- what a checkpoint holds -----------------------------------------------------------------------------------
def resume_state(fit: FitLoop) -> dict[str, Any]:
    """What a checkpoint written now needs to continue exactly from this point (plain data)."""
    context = fit.context
    progress = context.progress
    phase, batch_idx = progress.phase, progress.batch_idx
    data = _data_states(fit, phase)
    window = progress.window.before_current_batch() if phase is LoopPhase.STEP else progress.window.as_list()
    if phase is LoopPhase.STEP:  # written during training_step: resume before this batch (not bitwise)
        phase, batch_idx = LoopPhase.BETWEEN, batch_idx - 1
    elif phase is LoopPhase.EPOCH_START:
        phase, batch_idx, window = LoopPhase.BETWEEN, 0, [0, 1, True]
    module = context.module
    grads = None
    if phase in _MID_EPOCH and module is not None:
        window_open = not module.automatic_optimization or not window[2]
        if window_open:
            grads = [p.grad.detach().clone() if p.grad is not None else None for p in module.parameters()]
            if all(g is None for g in grads):
                grads = None
            elif any(type(g).__name__ == "DTensor" for g in grads if g is not None):
                # sharded gradients are each rank's own: rank 0's file cannot hold them
                rank_zero_warn(
                    "A checkpoint written inside an open gradient-accumulation window under a sharded strategy "
                    "does not keep that window's partial gradients: a run resumed from it restarts the window."
                )
                grads = None
    metrics = {k: v.detach().cpu().clone() if hasattr(v, "detach") else v
               for k, v in context.metrics.current_callback_metrics().items()}  # fmt: skip
    epoch_loop = fit.epoch_loop
    return {
        "phase": phase.value, "epoch": progress.current_epoch, "global_step": progress.global_step,
        "batch_idx": batch_idx, "total_batch_idx": progress.total_batch_idx,
        "batches_that_stepped": progress.batches_that_stepped, "is_last_batch": epoch_loop.is_last_batch,
        "val_pending": phase is LoopPhase.BATCH and (epoch_loop.validation_interrupted or epoch_loop.should_check_val()),
        "epoch_start_step": progress.epoch_start_step,
        "scheduler_steps": [progress.scheduler_steps.total, progress.scheduler_steps.epoch], "window": window,
        "rng": capture_rng(), "epoch_start_rng": fit.epoch_start_rng if phase in _MID_EPOCH else None,
        "grads": grads, "callback_metrics": metrics, "data": _step_layout(fit),
        "epoch_results": _epoch_results(fit) if phase in _MID_EPOCH else None, **data,
    }  # fmt: skip


def _step_layout(fit: FitLoop) -> dict[str, Any] | None:
    """The data layout, with the batches per optimizer step: a run on another number of processes continues
    the epoch when it trains as many samples per step (``GlobalBatchSize`` keeps that)."""
    layout = data_layout(fit.train_dataloader)
    if layout is not None:
        layout["accumulate"] = fit.context.accumulate_grad_batches
    return layout


def _data_states(fit: FitLoop, phase: LoopPhase) -> dict[str, Any]:
    """The states of the training data's parts that keep one (see ``loops/loader_state.py``): inside an epoch
    the position the epoch's iterator took before its look-ahead read (before the current batch when written
    during ``training_step``: the resumed run takes that batch again); at an epoch boundary, the state now."""
    loader = fit.train_dataloader
    if loader is None:
        return {}
    parts = data_parts(loader)
    batches = fit.batches
    position = None
    if parts.holders:
        inside = phase in _MID_EPOCH or phase is LoopPhase.STEP
        position = batches.position(phase is LoopPhase.STEP) if inside and batches is not None else parts.snapshot()
    # Lightning's list holds every train loader with a state, also when others have none
    loaders = position if parts.complete else [dl.state_dict() for dl in parts.loaders]
    return {
        "loader_states": loaders or None,
        "dataset_position": position if parts.dataset is not None else None,
        "map_dataset": parts.map_dataset.state_dict() if parts.map_dataset is not None else None,
    }


def _restore_data(fit: FitLoop, state: dict[str, Any]) -> bool:
    """Load the saved states into this run's training data; ``True`` when the data is back at its position
    (the resumed epoch then reads on, skipping nothing)."""
    parts = data_parts(fit.train_dataloader)
    if parts.map_dataset is not None and state.get("map_dataset") is not None:
        parts.map_dataset.load_state_dict(state["map_dataset"])
    saved = state.get("loader_states") if parts.complete else state.get("dataset_position")
    if saved is None or not parts.holders:
        return False
    parts.load_position(saved)
    return True


def _epoch_results(fit: FitLoop) -> dict[str, Any] | None:
    """The epoch aggregates of ``self.log(..., on_epoch=True)`` so far, so that the resumed epoch's values are
    the uninterrupted run's. Each process holds its own part of them: with several, every process's part is
    gathered into the file (all processes write a checkpoint together). Not on a save no other process joins:
    after a signal (each process stops at its own batch) or an error (the process group was left); the epoch's
    values then cover the batches after the resume."""
    context = fit.context
    strategy = context.strategy
    if strategy.world_size == 1:
        return {"world_size": 1, "items": fit.results.state_dict()}
    if context.stop.signal is not None:
        return None
    ranks = strategy.gather_objects(fit.results.state_dict())
    return None if ranks is None else {"world_size": strategy.world_size, "ranks": ranks}


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


def _counts(
    ready: int, completed: int, started: int | None = None, processed: int | None = None
) -> dict[str, int]:
    out = {"ready": ready, "completed": completed}
    if started is not None:
        out["started"] = started
    if processed is not None:
        out["processed"] = processed
    return out


def _batch_progress(current: dict[str, int], total: dict[str, int], is_last: bool) -> dict[str, Any]:
    return {"total": total, "current": current, "is_last_batch": is_last}


def _idle_eval_loop() -> dict[str, Any]:
    zero = _counts(0, 0, 0, 0)
    return {"state_dict": {}, "batch_progress": _batch_progress(dict(zero), dict(zero), False)}


def progress_counters(progress: FitProgress, is_last_batch: bool) -> dict[str, Any]:
    """Lightning's progress trackers of the fit loop (``ready`` / ``started`` / ``processed`` / ``completed``,
    ``current`` for this epoch, ``total`` for the run), computed from fulmen's counters and loop phase: what a
    checkpoint records under ``loops``, and what ``fit_loop.epoch_progress`` / ``epoch_loop.batch_progress`` read
    (one source of truth, computed only when read)."""
    phase = progress.phase
    epoch, b, tb = progress.current_epoch, progress.batch_idx, progress.total_batch_idx
    if phase is LoopPhase.BETWEEN:  # the next batch fetched, its start hooks running: ready, not started
        cur, tot = _counts(b + 1, b, b, b), _counts(tb + 1, tb, tb, tb)
    elif phase is LoopPhase.BATCH:  # inside the batch: Lightning counts it processed, not completed
        cur, tot = _counts(b, b - 1, b, b), _counts(tb + 1, tb, tb + 1, tb + 1)
    elif phase is LoopPhase.VALIDATION:
        cur, tot = _counts(b, b, b, b), _counts(tb + 1, tb + 1, tb + 1, tb + 1)
    else:
        cur, tot = _counts(b, b, b, b), _counts(tb, tb, tb, tb)
    if phase is LoopPhase.EPOCH_START:  # its start hooks running: the epoch is ready, started after them
        epoch_counts = _counts(epoch + 1, epoch, epoch, epoch)
    elif phase in (LoopPhase.BETWEEN, LoopPhase.BATCH, LoopPhase.VALIDATION):
        epoch_counts = _counts(epoch + 1, epoch, epoch + 1, epoch)
    elif phase is LoopPhase.EPOCH_END:
        epoch_counts = _counts(epoch + 1, epoch, epoch + 1, epoch + 1)
    else:
        epoch_counts = _counts(epoch, epoch, epoch, epoch)
    steps = progress.global_step
    epoch_steps = steps - progress.epoch_start_step
    sched = progress.scheduler_steps
    return {
        "epoch_progress": {"total": epoch_counts, "current": dict(epoch_counts)},
        "batch_progress": _batch_progress(cur, tot, is_last_batch),
        "scheduler_progress": {"total": _counts(sched.total, sched.total), "current": _counts(sched.epoch, sched.epoch)},
        "optimizer_step": {"total": _counts(steps, steps), "current": _counts(epoch_steps, epoch_steps)},
        "zero_grad": {"total": _counts(steps, steps, steps), "current": _counts(epoch_steps, epoch_steps, epoch_steps)},
    }


# which of fulmen's counters each of Lightning's trackers is read from: (tracker, scope) -> (object path, sign).
# A write to the tracker's defining counter moves that field by the difference between the value written and the
# value read, so the counter reads back what was written (the others of the tracker, derived from the same field
# and the loop's phase, move with it).
_TRACKER_FIELDS: dict[tuple[str, str], tuple[str, int]] = {
    ("epoch_progress", "current"): ("current_epoch", 1),
    ("epoch_progress", "total"): ("current_epoch", 1),
    ("batch_progress", "current"): ("batch_idx", 1),
    ("batch_progress", "total"): ("total_batch_idx", 1),
    ("scheduler_progress", "current"): ("scheduler_steps.epoch", 1),
    ("scheduler_progress", "total"): ("scheduler_steps.total", 1),
    ("optimizer_step", "current"): ("epoch_start_step", -1),  # read as global_step - epoch_start_step
    ("optimizer_step", "total"): ("global_step", 1),
    ("zero_grad", "current"): ("epoch_start_step", -1),
    ("zero_grad", "total"): ("global_step", 1),
}


# the counter that defines each tracker in Lightning: trainer.current_epoch is epoch_progress.current.completed,
# batch_idx is batch_progress.current.ready - 1, global_step is the optimizer step tracker's total.completed
_DEFINING_COUNTER = {"epoch_progress": "completed", "batch_progress": "ready", "scheduler_progress": "ready",
                     "optimizer_step": "completed", "zero_grad": "completed"}  # fmt: skip


def write_progress_counter(
    progress: FitProgress, is_last_batch: bool, tracker: str, scope: str, counter: str, value: int
) -> None:
    """``<tracker>.<scope>.<counter> = value`` on one of Lightning's trackers (a library setting
    ``trainer.fit_loop.epoch_loop.batch_progress.total.ready``): fulmen's counter behind it moves so that the
    tracker reads ``value``. The other counters of a tracker follow from that one and the loop's phase: a write to
    them is accepted and has no effect (libraries set ``ready`` and ``completed`` together)."""
    read = progress_counters(progress, is_last_batch)[tracker][scope]
    if counter not in read:
        raise AttributeError(f"{tracker}.{scope} has no counter {counter!r} (it has {sorted(read)})")
    if counter != _DEFINING_COUNTER[tracker]:
        return
    path, sign = _TRACKER_FIELDS[(tracker, scope)]
    owner_path, _, name = path.rpartition(".")
    owner = getattr(progress, owner_path) if owner_path else progress
    setattr(owner, name, getattr(owner, name) + sign * (int(value) - int(read[counter])))


def loops_state_dict(fit: FitLoop) -> dict[str, Any]:
    """``checkpoint["loops"]`` with Lightning's keys and counters, plus fulmen's exact-resume state."""
    progress = fit.context.progress
    counters = progress_counters(progress, fit.epoch_loop.is_last_batch)
    step_counts, zero_grad = counters["optimizer_step"], counters["zero_grad"]
    zero = _counts(0, 0, 0, 0)
    fulmen = resume_state(fit)
    loaders = fulmen.pop("loader_states", None)
    fit_state = {
        "state_dict": {"fulmen": fulmen, **({"combined_loader": loaders} if loaders else {})},
        "epoch_loop.state_dict": {"_batches_that_stepped": progress.batches_that_stepped},
        "epoch_loop.batch_progress": counters["batch_progress"],
        "epoch_loop.scheduler_progress": counters["scheduler_progress"],
        "epoch_loop.automatic_optimization.state_dict": {},
        "epoch_loop.automatic_optimization.optim_progress": {"optimizer": {"step": step_counts, "zero_grad": zero_grad}},
        "epoch_loop.manual_optimization.state_dict": {},
        "epoch_loop.manual_optimization.optim_step_progress": dict(step_counts),
        "epoch_loop.val_loop.state_dict": {},
        "epoch_loop.val_loop.batch_progress": _batch_progress(dict(zero), dict(zero), False),
        "epoch_progress": counters["epoch_progress"],
    }  # fmt: skip
    predict = _idle_eval_loop()
    predict["batch_progress"].pop("is_last_batch")
    return {"fit_loop": fit_state, "validate_loop": _idle_eval_loop(), "test_loop": _idle_eval_loop(),
            "predict_loop": predict}  # fmt: skip


def state_from_lightning(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Where a checkpoint written by Lightning stopped, from its progress counters (no RNG: not bitwise)."""
    fit = checkpoint.get("loops", {}).get("fit_loop", {})
    # the epoch counts of this run (`current`), which Lightning's current_epoch is: checkpoints upgraded from
    # before 1.6 record the epoch there only (their `total` is zero)
    epochs = fit.get("epoch_progress", {}).get("current", {})
    batches = fit.get("epoch_loop.batch_progress", {})
    cur, tot = batches.get("current", {}), batches.get("total", {})
    bts = fit.get("epoch_loop.state_dict", {}).get("_batches_that_stepped", 0)
    completed, processed = epochs.get("completed", 0), epochs.get("processed", 0)
    started = epochs.get("started", completed)
    state: dict[str, Any] = {"epoch": checkpoint.get("epoch", completed), "global_step": checkpoint.get("global_step", 0),
                             "batches_that_stepped": bts, "is_last_batch": bool(batches.get("is_last_batch", False)),
                             "val_pending": False}  # fmt: skip
    if processed > completed:
        state.update(phase="epoch_end", epoch=completed, batch_idx=cur.get("completed", 0),
                     total_batch_idx=tot.get("processed", 0))  # fmt: skip
    elif started > completed and cur.get("processed", 0) > 0:
        b = cur.get("processed", 0)
        phase = "batch" if b > cur.get("completed", 0) else "validation"
        state.update(phase=phase, epoch=completed, batch_idx=b, total_batch_idx=tot.get("processed", 1) - 1)
    else:
        state.update(phase="idle", epoch=completed, batch_idx=0, total_batch_idx=tot.get("processed", 0))
    return state


# -- continuing from it ---------------------------------------------------------------------------------------
def load_counters(progress: FitProgress, state: dict[str, Any]) -> None:
    """The counters, when the checkpoint is loaded (callbacks read them before the loop runs)."""
    progress.current_epoch = int(state["epoch"])
    progress.global_step = int(state["global_step"])
    progress.batch_idx = int(state.get("batch_idx", 0))
    progress.total_batch_idx = int(state.get("total_batch_idx", 0))
    progress.batches_that_stepped = int(state.get("batches_that_stepped", 0))
    progress.epoch_start_step = int(state.get("epoch_start_step", progress.global_step))
    progress.scheduler_steps.total, progress.scheduler_steps.epoch = (int(x) for x in state.get("scheduler_steps", [0, 0]))


def _restore_point(fit: FitLoop, state: dict[str, Any]) -> None:
    """RNG, open accumulation window and metrics as they were when the checkpoint was written."""
    context = fit.context
    if state.get("rng"):
        restore_rng(state["rng"])
    grads = state.get("grads")
    module = context.module
    if grads is not None and module is not None:
        for param, grad in zip(module.parameters(), grads):
            param.grad = None if grad is None else grad.to(param.device, copy=True)
    restore_metrics(fit, state)


def restore_metrics(fit: FitLoop, state: dict[str, Any]) -> None:
    """The metrics (a plateau scheduler still reads them). The stop decision of the run that wrote the checkpoint
    is not restored: resuming is a request to train on (after early stopping ended a run, with more patience or
    epochs), which Lightning honours and libraries rely on (finetuning-scheduler resumes a phase that way)."""
    context = fit.context
    context.metrics.callback.update(state.get("callback_metrics") or {})
    context.stop.should_stop = False
    context.stop.agreed = True  # every rank loaded the same checkpoint


def _load_epoch_results(fit: FitLoop, saved: dict[str, Any] | None) -> None:
    strategy = fit.context.strategy
    if saved is None or strategy.world_size != int(saved.get("world_size", 1)):
        return  # resumed on another number of processes: the epoch's values restart here
    items = saved["items"] if "items" in saved else saved["ranks"][strategy.global_rank]
    fit.results.load_state_dict(items, strategy.root_device, fit.context.module)


def _load_window(fit: FitLoop, state: list[Any] | None, batch_idx: int) -> None:
    if state is None:  # a Lightning checkpoint: windows of accumulate_grad_batches from the epoch start
        size = fit.context.accumulate_grad_batches
        pos = batch_idx % size
        state = [pos, size, pos == 0]
    fit.context.progress.window.load(state)


def written_mid_epoch(state: dict[str, Any]) -> bool:
    return LoopPhase(state["phase"]) in _MID_EPOCH


def written_after_last_batch(state: dict[str, Any]) -> bool:
    """Written once the epoch's last training batch ran (in its ``on_train_batch_end`` or the validation after
    it): the resumed epoch has no training left, only its end (no ``on_train_epoch_start`` again)."""
    return bool(state.get("is_last_batch")) and LoopPhase(state["phase"]) in (LoopPhase.BATCH, LoopPhase.VALIDATION)


def restore_epoch(fit: FitLoop, state: dict[str, Any]) -> tuple[PrefetchIterator, bool | None]:
    """Restore each part to where it was inside the epoch the checkpoint was written in (called once the
    epoch-start hooks ran): the batch counter; the data, read on from its own position or with the epoch's
    order redrawn and the batches done skipped; the RNG; the epoch's metric aggregates; the epoch loop and
    its accumulation window. Returns the rest of the epoch's batches, and whether the batch the checkpoint was
    written in still has to end (``TrainingEpochLoop.run``'s ``finish_batch``)."""
    phase = LoopPhase(state["phase"])
    batch_idx = int(state["batch_idx"])
    progress = fit.context.progress
    progress.batch_idx = batch_idx
    epoch_rng = state.get("epoch_start_rng")
    if _restore_data(fit, state):  # the data reads on from where it was: nothing to skip
        batches = fit.make_iterator(epoch_rng=epoch_rng, offset=batch_idx)
    else:
        saved, current = state.get("data"), data_layout(fit.train_dataloader)
        if state.get("grads") is not None and _resharded(saved, current):
            raise MisconfigurationException(
                "The checkpoint was written inside a gradient-accumulation window, whose partial gradients are "
                "each process's own: it resumes exactly only on the number of processes that wrote it. Resume "
                "it there, or from a checkpoint written after an optimizer step (ModelCheckpoint's)."
            )
        loader, batch_idx = _resharded_epoch_loader(fit, saved, current, int(state["epoch"]), batch_idx)
        if batch_idx != progress.batch_idx:  # counted in this run's batches, which hold fewer or more samples
            progress.total_batch_idx += batch_idx - progress.batch_idx
            progress.batch_idx = batch_idx
        batches = fit.make_iterator(skip=batch_idx, epoch_rng=epoch_rng, loader=loader)
    _restore_point(fit, state)
    _load_epoch_results(fit, state.get("epoch_results"))
    fit.epoch_loop.load_state_dict({"is_last_batch": bool(state.get("is_last_batch", False))})
    _load_window(fit, state.get("window"), batch_idx)
    finish = None if phase is LoopPhase.BETWEEN else bool(state.get("val_pending")) and phase is LoopPhase.BATCH
    return batches, finish


def written_at_epoch_end(state: dict[str, Any]) -> bool:
    """Written in ``on_train_epoch_end``: the resumed loop ends that epoch without running its hooks again."""
    return LoopPhase(state["phase"]) is LoopPhase.EPOCH_END


def restore_at_boundary(fit: FitLoop, state: dict[str, Any]) -> None:
    """Restore the data's state and the RNG of a checkpoint written between epochs (no gradients are open
    there; its metrics come earlier: :func:`restore_metrics`)."""
    fit.restored_at_epoch_end = _restore_data(fit, state)
    if state.get("rng"):
        restore_rng(state["rng"])


# -- resuming an epoch on another number of processes --------------------------------------------------------
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


def _resharded(saved: dict[str, Any] | None, current: dict[str, Any] | None) -> bool:
    """Whether a checkpoint with data layout ``saved`` was written on another number of processes (or drawn
    its order for another number) than this run's layout ``current``."""
    if saved is None or current is None:
        return False
    same = (saved["replicas"], saved["distributed"]) == (current["replicas"], current["distributed"]) and (
        not saved["distributed"] or order_replicas(saved) == order_replicas(current)
    )
    return not same


def _resharded_epoch_loader(
    fit: FitLoop, saved: dict[str, Any] | None, current: dict[str, Any] | None, epoch: int, batch_idx: int
) -> tuple[Any, int]:
    """``(None, batch_idx)`` when the checkpoint's data layout ``saved`` is this run's loader's ``current``
    (the batches are skipped as usual); otherwise a loader for the rest of the interrupted epoch on this run's
    processes, and the batches of this run that the samples already trained make (``batch_idx`` when each
    batch holds as many samples across the processes as the interrupted run's; otherwise the steps done times
    this run's accumulation)."""
    loader = fit.train_dataloader
    if batch_idx == 0 or not _resharded(saved, current):
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
    accumulate, new_accumulate = int(saved.get("accumulate", 1)), fit.context.accumulate_grad_batches
    step, new_step = per_batch * accumulate, new_per_batch * new_accumulate
    done = batch_idx * per_batch  # samples of the epoch's global order already trained
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

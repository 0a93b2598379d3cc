"""Exact resume: what a checkpoint holds of the fit loop, and how a run continues from it.

The file keeps Lightning's ``loops`` progress counters (so files move both ways between fulmen and
Lightning) and adds fulmen's exact-resume state under ``loops.fit_loop.state_dict.fulmen`` (Lightning ignores
it): where in the loop the file was written (:class:`LoopPhase`), the RNG states at that point and at the start
of the epoch, gradients of an open accumulation window, the metrics a plateau scheduler still has to read, the
epoch's metric aggregates and the state of data that keeps its own position (``loops/loader_state.py``). The
fit loop runs the interrupted epoch like any other; this module has each part restore its state once the
epoch's start hooks ran (:func:`restore_epoch`): RNG restored, the data read on from its position or the
epoch's order redrawn from the epoch-start RNG with the batches already trained skipped without loading them.
Each restore step is a method of the loop or part that owns the state (``TrainingData.restore_position``,
``FitLoop.restore_epoch_results``, ``TrainingEpochLoop.restore_window``); this module reads the checkpoint's
keys and calls them in order.

The data position is also kept as a count of samples of the epoch's *global* order, so that a run on a
different number of processes goes on with the rest of the epoch (``loops/resharding.py``, whose names stay
importable from here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch.utils.data import DistributedSampler as DistributedSampler
from torch.utils.data import RandomSampler as RandomSampler
from torch.utils.data import Sampler as Sampler
from torch.utils.data import SequentialSampler as SequentialSampler

from fulmen.loops.loader_state import data_parts
from fulmen.loops.resharding import OrderKeepingSampler as OrderKeepingSampler
from fulmen.loops.resharding import data_layout, resharded, resharded_epoch_loader
from fulmen.loops.resharding import global_order as global_order
from fulmen.loops.resharding import keep_order as keep_order
from fulmen.loops.resharding import order_replicas as order_replicas
from fulmen.overrides.distributed import DistributedSamplerWrapper as DistributedSamplerWrapper
from fulmen.overrides.distributed import (
    UnrepeatedDistributedSamplerWrapper as UnrepeatedDistributedSamplerWrapper,
)
from fulmen.runtime.rng import capture_rng, restore_rng
from fulmen.runtime.state import FitProgress, LoopPhase
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.loader_rebuild import rebuild_dataloader as rebuild_dataloader
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_warn

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
    fit.restore_epoch_results(saved["items"] if "items" in saved else saved["ranks"][strategy.global_rank])


def _restore_data(fit: FitLoop, state: dict[str, Any], at_epoch_end: bool = False) -> bool:
    """The training data's saved states, loaded by the data (``TrainingData.restore_position``)."""
    return fit.training_data.restore_position(
        state.get("map_dataset"), state.get("loader_states"), state.get("dataset_position"), at_epoch_end=at_epoch_end
    )


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
        if state.get("grads") is not None and resharded(saved, current):
            raise MisconfigurationException(
                "The checkpoint was written inside a gradient-accumulation window, whose partial gradients are "
                "each process's own: it resumes exactly only on the number of processes that wrote it. Resume "
                "it there, or from a checkpoint written after an optimizer step (ModelCheckpoint's)."
            )
        loader, batch_idx = resharded_epoch_loader(
            fit.train_dataloader, saved, current, int(state["epoch"]), batch_idx, fit.context.accumulate_grad_batches
        )
        if batch_idx != progress.batch_idx:  # counted in this run's batches, which hold fewer or more samples
            progress.total_batch_idx += batch_idx - progress.batch_idx
            progress.batch_idx = batch_idx
        batches = fit.make_iterator(skip=batch_idx, epoch_rng=epoch_rng, loader=loader)
    _restore_point(fit, state)
    _load_epoch_results(fit, state.get("epoch_results"))
    fit.epoch_loop.load_state_dict({"is_last_batch": bool(state.get("is_last_batch", False))})
    fit.epoch_loop.restore_window(state.get("window"), batch_idx)
    finish = None if phase is LoopPhase.BETWEEN else bool(state.get("val_pending")) and phase is LoopPhase.BATCH
    return batches, finish


def written_at_epoch_end(state: dict[str, Any]) -> bool:
    """Written in ``on_train_epoch_end``: the resumed loop ends that epoch without running its hooks again."""
    return LoopPhase(state["phase"]) is LoopPhase.EPOCH_END


def restore_at_boundary(fit: FitLoop, state: dict[str, Any]) -> None:
    """Restore the data's state and the RNG of a checkpoint written between epochs (no gradients are open
    there; its metrics come earlier: :func:`restore_metrics`)."""
    _restore_data(fit, state, at_epoch_end=True)
    if state.get("rng"):
        restore_rng(state["rng"])


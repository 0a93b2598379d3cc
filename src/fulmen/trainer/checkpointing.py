"""Checkpoint contents: what goes into a checkpoint, and how a run is restored from one.

The file is Lightning's format (same top-level keys, the same ``loops`` progress counters), so files move
both ways between fulmen and Lightning. fulmen adds what exact resume needs under
``loops.fit_loop.state_dict.fulmen`` (Lightning ignores it): where in the loop the file was written, the RNG
states at that point and at the start of the epoch, gradients of an open accumulation window and the
metrics a plateau scheduler still has to read.
"""

from __future__ import annotations

import enum
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fulmen.utilities import checkpoint_io
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer

CHECKPOINT_VERSION_KEY = "pytorch-lightning_version"
# The Lightning release whose format fulmen writes: Lightning reads the version key to migrate old files.
FORMAT_VERSION = "2.6.6"


# -- hyperparameters as primitives ---------------------------------------------------------------------------
def to_primitive(value: Any) -> Any:
    """Hyperparameters as plain data (what ``weights_only`` loading can rebuild): no classes, no callables."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, enum.Enum):
        return to_primitive(value.value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, dict):
        return {str(k): to_primitive(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [to_primitive(v) for v in value]
        return items if isinstance(value, list | set | frozenset) else tuple(items)
    if isinstance(value, torch.dtype | torch.device):
        return str(value)
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().clone()
    return repr(value)


# -- RNG states ---------------------------------------------------------------------------------------------
def capture_rng() -> dict[str, Any]:
    """Every global RNG, as tensors and primitives (numpy's state is stored as a list of ints)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    try:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = np.random.get_state()  # type: ignore[misc]
        state["numpy"] = (str(kind), [int(k) for k in keys], int(pos), int(has_gauss), float(gauss))
    except ImportError:
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        states = state["cuda"]
        if len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)


def capture_generator_states(loader: Any) -> list[torch.Tensor | None]:
    """States of the private generators a dataloader shuffles with (loader and sampler ``generator``)."""
    return [g.get_state() if isinstance(g, torch.Generator) else None for g in _loader_generators(loader)]


def restore_generator_states(loader: Any, states: list[torch.Tensor | None]) -> None:
    for gen, state in zip(_loader_generators(loader), states):
        if isinstance(gen, torch.Generator) and state is not None:
            gen.set_state(state)


def _loader_generators(loader: Any) -> list[Any]:
    sampler = getattr(loader, "sampler", None)
    inner = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
    return [getattr(loader, "generator", None), getattr(sampler, "generator", None),
            getattr(inner, "generator", None) if inner is not sampler else None]  # fmt: skip


# -- Lightning's loop progress counters -----------------------------------------------------------------------
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


def loops_state_dict(trainer: Trainer) -> dict[str, Any]:
    """``checkpoint["loops"]`` with Lightning's keys and counters, plus fulmen's exact-resume state."""
    fit = trainer.fit_loop
    progress = trainer._progress
    phase = fit.phase
    epoch, b, tb = progress.current_epoch, progress.batch_idx, progress.total_batch_idx
    if phase == "batch":  # written inside the batch: Lightning counts it processed, not completed
        cur, tot = _counts(b, b - 1, b, b), _counts(tb + 1, tb, tb + 1, tb + 1)
    elif phase == "validation":
        cur, tot = _counts(b, b, b, b), _counts(tb + 1, tb + 1, tb + 1, tb + 1)
    else:
        cur, tot = _counts(b, b, b, b), _counts(tb, tb, tb, tb)
    if phase in ("batch", "validation", "epoch_start"):
        epoch_counts = _counts(epoch + 1, epoch, epoch + 1, epoch)
    elif phase == "epoch_end":
        epoch_counts = _counts(epoch + 1, epoch, epoch + 1, epoch + 1)
    else:
        epoch_counts = _counts(epoch, epoch, epoch, epoch)
    steps = progress.global_step
    epoch_steps = steps - fit.epoch_start_step
    sched = fit.epoch_loop.scheduler_steps
    step_counts = {"total": _counts(steps, steps), "current": _counts(epoch_steps, epoch_steps)}
    zero_grad = {
        "total": _counts(steps, steps, steps),
        "current": _counts(epoch_steps, epoch_steps, epoch_steps),
    }
    zero = _counts(0, 0, 0, 0)
    fit_state = {
        "state_dict": {"fulmen": fit.resume_state()},
        "epoch_loop.state_dict": {"_batches_that_stepped": progress.batches_that_stepped},
        "epoch_loop.batch_progress": _batch_progress(cur, tot, fit.epoch_loop.is_last_batch),
        "epoch_loop.scheduler_progress": {"total": _counts(sched[0], sched[0]), "current": _counts(sched[1], sched[1])},
        "epoch_loop.automatic_optimization.state_dict": {},
        "epoch_loop.automatic_optimization.optim_progress": {"optimizer": {"step": step_counts, "zero_grad": zero_grad}},
        "epoch_loop.manual_optimization.state_dict": {},
        "epoch_loop.manual_optimization.optim_step_progress": {"total": _counts(steps, steps),
                                                               "current": _counts(epoch_steps, epoch_steps)},
        "epoch_loop.val_loop.state_dict": {},
        "epoch_loop.val_loop.batch_progress": _batch_progress(dict(zero), dict(zero), False),
        "epoch_progress": {"total": epoch_counts, "current": dict(epoch_counts)},
    }  # fmt: skip
    predict = _idle_eval_loop()
    predict["batch_progress"].pop("is_last_batch")
    return {"fit_loop": fit_state, "validate_loop": _idle_eval_loop(), "test_loop": _idle_eval_loop(),
            "predict_loop": predict}  # fmt: skip


def resume_state_from_lightning(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Where a checkpoint written by Lightning stopped, from its progress counters (no RNG: not bitwise)."""
    fit = checkpoint.get("loops", {}).get("fit_loop", {})
    epochs = fit.get("epoch_progress", {}).get("total", {})
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


# -- the checkpoint dict ------------------------------------------------------------------------------------
def dump_checkpoint(trainer: Trainer, weights_only: bool = False) -> dict[str, Any]:
    module = trainer.lightning_module
    if module is None:
        raise MisconfigurationException(
            "trainer.save_checkpoint() needs a model: call it during or after fit()."
        )
    checkpoint: dict[str, Any] = {
        "epoch": trainer.current_epoch,
        "global_step": trainer.global_step,
        CHECKPOINT_VERSION_KEY: FORMAT_VERSION,
        "state_dict": trainer.strategy.state_dict(),
        "loops": loops_state_dict(trainer),
    }
    if not weights_only:
        callback_states: dict[str, Any] = {}
        for cb in trainer.callbacks:
            state = cb.state_dict()
            if state:
                callback_states[cb.state_key] = state
        checkpoint["callbacks"] = callback_states
        checkpoint["optimizer_states"] = [opt.state_dict() for opt in trainer.optimizers]
        checkpoint["lr_schedulers"] = [cfg.scheduler.state_dict() for cfg in trainer.lr_scheduler_configs]
        precision = trainer.precision_plugin
        precision_state = precision.state_dict()
        if precision_state:
            checkpoint[type(precision).__qualname__] = precision_state
    datamodule = trainer.datamodule
    if datamodule is not None:
        dm_state = datamodule.state_dict()
        if dm_state:
            checkpoint[type(datamodule).__qualname__] = dm_state
    _store_hparams(checkpoint, module, "")
    if datamodule is not None:
        _store_hparams(checkpoint, datamodule, "datamodule_")
    if not weights_only:
        if datamodule is not None:
            trainer._hooks.call_datamodule("on_save_checkpoint", checkpoint)
        trainer._hooks.call_callbacks("on_save_checkpoint", checkpoint)
    trainer._hooks.call_module("on_save_checkpoint", checkpoint)
    return checkpoint


def _store_hparams(checkpoint: dict[str, Any], obj: Any, prefix: str) -> None:
    hparams = getattr(obj, "_hparams", None)
    if not hparams:
        return
    checkpoint[f"{prefix}hparams_name"] = getattr(obj, "_hparams_name", None) or "kwargs"
    checkpoint[f"{prefix}hyper_parameters"] = to_primitive(dict(hparams))


def save_checkpoint(trainer: Trainer, filepath: str | os.PathLike[str], weights_only: bool = False) -> None:
    path = os.fspath(filepath)
    checkpoint = dump_checkpoint(trainer, weights_only=weights_only or path.endswith(".safetensors"))
    if not trainer.is_global_zero:
        return
    if path.endswith(".safetensors"):
        checkpoint_io.save_safetensors(checkpoint, path)
    else:
        checkpoint_io.save(checkpoint, path)


# -- restoring ----------------------------------------------------------------------------------------------
def resolve_ckpt_path(trainer: Trainer, ckpt_path: Any) -> str | None:
    """``"last"``, ``"best"`` or a path -> a file path (``None``: start from scratch)."""
    if ckpt_path is None:
        return None
    if ckpt_path == "best":
        cb = trainer.checkpoint_callback
        best = getattr(cb, "best_model_path", "") if cb is not None else ""
        if not best:
            raise ValueError(
                'ckpt_path="best" but no best checkpoint is known: no ModelCheckpoint has saved one in this '
                "trainer. Run fit() with a ModelCheckpoint(monitor=...) first, or pass a file path."
            )
        return str(best)
    if ckpt_path == "last":
        candidates: list[Path] = []
        for cb in trainer.checkpoint_callbacks:
            last = getattr(cb, "last_model_path", "")
            if last and os.path.exists(last):
                candidates.append(Path(last))
            finder = getattr(cb, "find_last_checkpoints", None)
            if finder is not None:
                candidates.extend(finder(trainer))
        if not candidates:
            rank_zero_warn('ckpt_path="last" found no last checkpoint: training starts from scratch.')
            return None
        return str(max(candidates, key=lambda p: p.stat().st_mtime))
    if not isinstance(ckpt_path, str | os.PathLike):
        raise MisconfigurationException(
            f"ckpt_path={ckpt_path!r} must be a file path, 'last', 'best' or None."
        )
    path = os.fspath(ckpt_path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"ckpt_path={path!r}: no such checkpoint file.")
    return path


def restore_module_and_callbacks(
    trainer: Trainer, checkpoint: dict[str, Any], callbacks: bool = True
) -> None:
    """Weights, module / datamodule hooks and callback states (before optimizers exist)."""
    module = trainer.lightning_module
    assert module is not None
    datamodule = trainer.datamodule
    if datamodule is not None:
        trainer._hooks.call_datamodule("on_load_checkpoint", checkpoint)
        dm_state = checkpoint.get(type(datamodule).__qualname__)
        if dm_state:
            datamodule.load_state_dict(dm_state)
    trainer._hooks.call_module("on_load_checkpoint", checkpoint)
    if "state_dict" not in checkpoint:
        raise KeyError("The checkpoint has no 'state_dict' key: it is not a model checkpoint.")
    strict = getattr(module, "strict_loading", True)
    module.load_state_dict(checkpoint["state_dict"], strict=strict)
    if not callbacks:
        return
    trainer._hooks.call_callbacks("on_load_checkpoint", checkpoint)
    states = checkpoint.get("callbacks", {})
    for cb in trainer.callbacks:
        state = states.get(cb.state_key)
        if state is None:
            legacy = getattr(cb, "_legacy_state_key", None)
            state = states.get(legacy) if legacy else None
        if state:
            cb.load_state_dict(state)


def _load_states(ckpt_path: str, what: str, states: list[Any], targets: list[Any]) -> None:
    if len(states) != len(targets):
        raise MisconfigurationException(
            f"{ckpt_path!r} holds {len(states)} {what} states but configure_optimizers() returned "
            f"{len(targets)} {what}s. Resume with the configuration that wrote the checkpoint."
        )
    for target, state in zip(targets, states):
        target.load_state_dict(state)


def restore_training_state(trainer: Trainer, checkpoint: dict[str, Any], ckpt_path: str) -> None:
    """Optimizers, schedulers, precision and loop position (after ``configure_optimizers``)."""
    if "optimizer_states" not in checkpoint:
        raise KeyError(
            f"{ckpt_path!r} holds no optimizer states (saved with weights_only=True?): it cannot resume "
            "training. Load the weights with Model.load_from_checkpoint() and start a new fit() instead."
        )
    _load_states(ckpt_path, "optimizer", checkpoint["optimizer_states"], trainer.optimizers)
    schedulers = [cfg.scheduler for cfg in trainer.lr_scheduler_configs]
    _load_states(ckpt_path, "LR scheduler", checkpoint.get("lr_schedulers", []), schedulers)
    precision = trainer.precision_plugin
    # Lightning 1.x saved a GradScaler's state under "native_amp_scaling_state"
    precision_state = checkpoint.get(type(precision).__qualname__) or checkpoint.get(
        "native_amp_scaling_state"
    )
    if precision_state:
        precision.load_state_dict(precision_state)
    fit_state = checkpoint.get("loops", {}).get("fit_loop", {})
    resume = fit_state.get("state_dict", {}).get("fulmen")
    if resume is None:
        resume = resume_state_from_lightning(checkpoint)
    trainer.fit_loop.load_resume_state(resume)
    rank_zero_info(f"Restored training state from {ckpt_path!r} (epoch {trainer.current_epoch}, "
                   f"global step {trainer.global_step}).")  # fmt: skip

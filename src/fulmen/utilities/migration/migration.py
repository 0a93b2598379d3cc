"""The changes of the checkpoint format across Lightning versions, each as a function that upgrades a
checkpoint dict in place.

:func:`fulmen.utilities.migration.utils.migrate_checkpoint` applies, in order, every function listed under
a version newer than the checkpoint's ``pytorch-lightning_version``. A file is upgraded for good with
``python -m fulmen.utilities.upgrade_checkpoint PATH`` (it keeps a ``.bak`` copy of the original).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning

_CHECKPOINT = dict[str, Any]


def _migration_index() -> dict[str, list[Callable[[_CHECKPOINT], _CHECKPOINT]]]:
    """Lightning version that changed the format -> the upgrades to apply to older checkpoints, in order."""
    return {
        "0.10.0": [_migrate_model_checkpoint_early_stopping],
        "1.6.0": [_migrate_loop_global_step_to_progress_tracking, _migrate_loop_current_epoch_to_progress_tracking],
        "1.6.5": [_migrate_loop_batches_that_stepped],
        "1.9.0": [_migrate_model_checkpoint_save_on_train_epoch_end_default],
        "2.0.0": [
            _drop_apex_amp_state,
            _migrate_loop_structure_after_tbptt_removal,
            _migrate_loop_structure_after_optimizer_loop_removal,
            _migrate_loop_structure_after_dataloader_loop_removal,
        ],
    }


# the callbacks whose pre-0.10 state the upgrade moves (ModelCheckpoint, EarlyStopping), by name. They sit above
# this layer and add themselves when they are defined (`holds_legacy_state`).
_LEGACY_STATE_OWNERS: dict[str, type] = {}

T = TypeVar("T", bound=type)


def holds_legacy_state(cls: T) -> T:
    """Class decorator: before 0.10, ``cls``'s state was top-level checkpoint keys (see
    :func:`_migrate_model_checkpoint_early_stopping`)."""
    _LEGACY_STATE_OWNERS[cls.__name__] = cls
    return cls


def _callback_class(name: str) -> type | str:
    """ModelCheckpoint / EarlyStopping. Before 0.10 their state was top-level keys; it moved under
    ``callbacks``, keyed by the callback's class itself (what the trainer matches a callback's state by when
    the checkpoint has no newer, string key for it). A class not defined in this process has no instance to
    claim the state: the class's name keys it then (the ``upgrade_checkpoint`` command loads both, so the files
    it writes hold the classes)."""
    return _LEGACY_STATE_OWNERS.get(name, name)


# pre-0.10 top-level key -> (callback, its state key)
_PRE_0_10_CALLBACK_KEYS = {
    "checkpoint_callback_best_model_score": ("ModelCheckpoint", "best_model_score"),
    "checkpoint_callback_best_model_path": ("ModelCheckpoint", "best_model_path"),
    "checkpoint_callback_best": ("ModelCheckpoint", "best_model_score"),
    "early_stop_callback_wait": ("EarlyStopping", "wait_count"),
    "early_stop_callback_patience": ("EarlyStopping", "patience"),
}


def _migrate_model_checkpoint_early_stopping(checkpoint: _CHECKPOINT) -> _CHECKPOINT:
    """0.10.0: ModelCheckpoint's and EarlyStopping's state moved from top-level keys into ``callbacks``."""
    callbacks = checkpoint["callbacks"] = checkpoint.get("callbacks") or {}
    for old_key, (callback, state_key) in _PRE_0_10_CALLBACK_KEYS.items():
        if old_key in checkpoint:
            cls = _callback_class(callback)
            callbacks[cls] = callbacks.get(cls) or {}
            callbacks[cls][state_key] = checkpoint.pop(old_key)
    return checkpoint


def _fit_loop_state_1_6_0() -> dict[str, Any]:
    """The fit loop's progress tracking as Lightning 1.6.0 first wrote it, every counter at zero."""

    def counts(*names: str) -> dict[str, int]:
        return dict.fromkeys(names, 0)

    def progress(*names: str) -> dict[str, Any]:
        return {"current": counts(*names), "total": counts(*names)}

    batch = {**progress("completed", "processed", "ready", "started"), "is_last_batch": False}
    return {
        "epoch_loop.batch_loop.manual_loop.optim_step_progress": progress("completed", "ready"),
        "epoch_loop.batch_loop.manual_loop.state_dict": {},
        "epoch_loop.batch_loop.optimizer_loop.optim_progress": {
            "optimizer": {
                "step": progress("completed", "ready"),
                "zero_grad": progress("completed", "ready", "started"),
            },
            "optimizer_position": 0,
        },
        "epoch_loop.batch_loop.optimizer_loop.state_dict": {},
        "epoch_loop.batch_loop.state_dict": {},
        "epoch_loop.batch_progress": batch,
        "epoch_loop.scheduler_progress": progress("completed", "ready"),
        "epoch_loop.state_dict": {"_batches_that_stepped": 0},
        "epoch_loop.val_loop.dataloader_progress": progress("completed", "ready"),
        "epoch_loop.val_loop.epoch_loop.batch_progress": {
            **progress("completed", "processed", "ready", "started"), "is_last_batch": False,
        },
        "epoch_loop.val_loop.epoch_loop.state_dict": {},
        "epoch_loop.val_loop.state_dict": {},
        "epoch_progress": progress("completed", "processed", "ready", "started"),
        "state_dict": {},
    }


def _fit_loop(checkpoint: _CHECKPOINT) -> dict[str, Any]:
    """The checkpoint's fit-loop state, created at zero (1.6.0's layout) when it has none."""
    loops = checkpoint.setdefault("loops", {"fit_loop": _fit_loop_state_1_6_0()})
    return loops.setdefault("fit_loop", _fit_loop_state_1_6_0())


def _migrate_loop_global_step_to_progress_tracking(checkpoint: _CHECKPOINT) -> _CHECKPOINT:
    """1.6.0: the optimizer steps taken are counted by the loops' progress tracking (``global_step`` is read
    from it). A loop state saved with the checkpoint replaces what this sets."""
    global_step = checkpoint["global_step"]
    fit_loop = _fit_loop(checkpoint)
    optimizer_progress = fit_loop["epoch_loop.batch_loop.optimizer_loop.optim_progress"]
    optimizer_progress["optimizer"]["step"]["total"]["completed"] = global_step  # automatic optimization
    fit_loop["epoch_loop.batch_loop.manual_loop.optim_step_progress"]["total"]["completed"] = global_step  # manual
    return checkpoint


def _migrate_loop_current_epoch_to_progress_tracking(checkpoint: _CHECKPOINT) -> _CHECKPOINT:
    """1.6.0: the current epoch is counted by the fit loop's epoch progress."""
    _fit_loop(checkpoint)["epoch_progress"]["current"]["completed"] = checkpoint["epoch"]
    return checkpoint


def _migrate_loop_batches_that_stepped(checkpoint: _CHECKPOINT) -> _CHECKPOINT:
    """1.6.5: the training epoch loop counts the batches that stepped the optimizer (the step loggers log
    at); before, that was the global step."""
    epoch_loop_state = checkpoint["loops"]["fit_loop"]["epoch_loop.state_dict"]
    epoch_loop_state.setdefault("_batches_that_stepped", checkpoint["global_step"])
    return checkpoint


_SAVE_ON_TRAIN_EPOCH_END = re.compile(r", 'save_on_train_epoch_end': (None|True|False)")


def _migrate_model_checkpoint_save_on_train_epoch_end_default(checkpoint: _CHECKPOINT) -> _CHECKPOINT:
    """1.9.0: ``save_on_train_epoch_end`` is no longer part of ModelCheckpoint's state key. When dropping it
    would give two states one key (or the states are keyed by class, before 1.5), nothing is renamed: which
    state belongs to which callback could not be told apart."""
    if "callbacks" not in checkpoint:
        return checkpoint
    states = checkpoint["callbacks"]
    renamed = {
        (_SAVE_ON_TRAIN_EPOCH_END.sub("", key) if key.startswith("ModelCheckpoint") else key): state
        for key, state in states.items()
        if isinstance(key, str)
    }
    if len(renamed) < len(states):
        rank_zero_warn(
            "You have multiple `ModelCheckpoint` callback states in this checkpoint, but we found state keys that "
            "would end up colliding with each other after an upgrade, which means we can't differentiate which of "
            "your checkpoint callbacks needs which states. At least one of your `ModelCheckpoint` callbacks will "
            "not be able to reload the state.",
            category=PossibleUserWarning,
        )
        return checkpoint
    checkpoint["callbacks"] = renamed
    return checkpoint


def _drop_apex_amp_state(checkpoint: _CHECKPOINT) -> _CHECKPOINT:
    """2.0.0: NVIDIA apex mixed precision is gone; its saved state cannot be loaded by anything."""
    if "amp_scaling_state" in checkpoint:
        rank_zero_warn("This checkpoint contains apex AMP data, but apex support has been removed in v2.0.0.")
        del checkpoint["amp_scaling_state"]
    return checkpoint


def _migrate_loop_structure_after_tbptt_removal(checkpoint: _CHECKPOINT) -> _CHECKPOINT:
    """2.0.0: without truncated backpropagation the training batch loop went; the optimizer and manual loops
    became children of the epoch loop. A custom batch loop's state is kept aside, under
    ``epoch_loop.state_dict["old_batch_loop_state_dict"]``, for whoever wants to read it."""
    fit_loop = checkpoint.get("loops", {}).get("fit_loop")
    if fit_loop is None:
        return checkpoint
    for child in ("manual_loop.optim_step_progress", "manual_loop.state_dict", "optimizer_loop.optim_progress",
                  "optimizer_loop.state_dict"):  # fmt: skip
        old = f"epoch_loop.batch_loop.{child}"
        if old in fit_loop:
            fit_loop[f"epoch_loop.{child}"] = fit_loop.pop(old)
    batch_loop_state = fit_loop.pop("epoch_loop.batch_loop.state_dict", None)
    if batch_loop_state:
        fit_loop["epoch_loop.state_dict"]["old_batch_loop_state_dict"] = batch_loop_state
    return checkpoint


def _migrate_loop_structure_after_optimizer_loop_removal(checkpoint: _CHECKPOINT) -> _CHECKPOINT:
    """2.0.0: automatic optimization steps one optimizer per batch, so there is no loop over optimizers (and
    no position in it to resume from); the two optimization loops were renamed."""
    fit_loop = checkpoint.get("loops", {}).get("fit_loop")
    if fit_loop is None:
        return checkpoint
    if "epoch_loop.optimizer_loop.optim_progress" in fit_loop:
        fit_loop["epoch_loop.optimizer_loop.optim_progress"].pop("optimizer_position", None)
    renames = (("optimizer_loop", "automatic_optimization", "optim_progress"),
               ("manual_loop", "manual_optimization", "optim_step_progress"))  # fmt: skip
    for old, new, progress in renames:
        if f"epoch_loop.{old}.state_dict" in fit_loop:
            fit_loop[f"epoch_loop.{new}.state_dict"] = fit_loop.pop(f"epoch_loop.{old}.state_dict")
            fit_loop[f"epoch_loop.{new}.{progress}"] = fit_loop.pop(f"epoch_loop.{old}.{progress}")
    return checkpoint


def _migrate_loop_structure_after_dataloader_loop_removal(checkpoint: _CHECKPOINT) -> _CHECKPOINT:
    """2.0.0: the evaluation and prediction loops no longer have a loop over dataloaders around their epoch
    loop: the epoch loop's entries move up one level, and the dataloader progress goes."""
    loops = checkpoint.get("loops")
    if loops is None:
        return checkpoint
    for name in ("predict_loop", "validate_loop", "test_loop"):
        loop = loops.get(name)
        if loop is None:
            continue
        loop.pop("dataloader_progress", None)
        for key in [k for k in loop if k.startswith("epoch_loop.")]:
            loop[key.removeprefix("epoch_loop.")] = loop.pop(key)
    return checkpoint


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "EarlyStopping": "fulmen.callbacks.early_stopping.EarlyStopping",
    "ModelCheckpoint": "fulmen.callbacks.model_checkpoint.ModelCheckpoint",
})  # fmt: skip

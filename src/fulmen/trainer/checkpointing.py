"""Checkpoint contents: what goes into a checkpoint, and how a run is restored from one.

The file is Lightning's format (same top-level keys), so files move both ways between fulmen and Lightning.
The fit loop's part (Lightning's progress counters plus fulmen's exact-resume state) is written and read by
:mod:`fulmen.loops.resume`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from fulmen.loops import resume
from fulmen.runtime.state import TrainerFn
from fulmen.utilities import cloud_io
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import LIGHTNING_VERSION
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer

CHECKPOINT_VERSION_KEY = "pytorch-lightning_version"
FORMAT_VERSION = LIGHTNING_VERSION  # Lightning reads the version key to migrate old files


# -- the checkpoint dict ------------------------------------------------------------------------------------
def dump_checkpoint(trainer: Trainer, weights_only: bool = False) -> dict[str, Any]:
    module = trainer.lightning_module
    if module is None:
        raise AttributeError(
            "Saving a checkpoint is only possible if a model is attached: call it during or after trainer.fit()."
        )
    checkpoint: dict[str, Any] = {
        "epoch": trainer.current_epoch,
        "global_step": trainer.global_step,
        CHECKPOINT_VERSION_KEY: FORMAT_VERSION,
        "state_dict": trainer.strategy.lightning_module_state_dict(),
        "loops": resume.loops_state_dict(trainer.fit_loop),
    }
    if not weights_only:
        callback_states: dict[str, Any] = {}
        for cb in trainer.callbacks:
            state = cb.state_dict()
            if state:
                callback_states[cb.state_key] = state
        checkpoint["callbacks"] = callback_states
        checkpoint["optimizer_states"] = [trainer.strategy.optimizer_state(opt) for opt in trainer.optimizers]
        checkpoint["lr_schedulers"] = [cfg.scheduler.state_dict() for cfg in trainer.lr_scheduler_configs]
        precision = trainer.precision_plugin
        precision_state = precision.state_dict()
        if precision_state:
            checkpoint[type(precision).__qualname__] = precision_state
    datamodule = trainer.datamodule
    hooks = trainer.run_context.hooks
    if datamodule is not None:
        dm_state = hooks.call_datamodule("state_dict")  # through the dispatcher: the profiler records it
        if dm_state:
            checkpoint[type(datamodule).__qualname__] = dm_state
    _store_hparams(checkpoint, module)
    if datamodule is not None:
        _store_hparams(checkpoint, datamodule)
    if not weights_only:
        if datamodule is not None:
            hooks.call_datamodule("on_save_checkpoint", checkpoint)
        hooks.call_callbacks("on_save_checkpoint", checkpoint)
    hooks.call_module("on_save_checkpoint", checkpoint)
    return checkpoint


def _store_hparams(checkpoint: dict[str, Any], obj: Any) -> None:
    hparams = getattr(obj, "_hparams", None)
    if not hparams:
        return
    checkpoint[obj.CHECKPOINT_HYPER_PARAMS_NAME] = getattr(obj, "_hparams_name", None) or "kwargs"
    # the values themselves, as Lightning stores them: an object among them (a module, a function, a class, an
    # enum ...) is pickled, so that load_from_checkpoint rebuilds the model that was saved. Loading such a file
    # then needs the caller's trust (weights_only=False, or its classes in torch's allow-list): without it the
    # load is refused, never completed with other values (paths are on fulmen's own allow-list: no trust needed)
    checkpoint[obj.CHECKPOINT_HYPER_PARAMS_KEY] = dict(hparams)


def save_checkpoint(
    trainer: Trainer, filepath: str | os.PathLike[str], weights_only: bool = False, storage_options: Any = None
) -> None:
    path = cloud_io.local(filepath)
    with trainer.run_context.hooks.profile("save_checkpoint"):
        checkpoint = dump_checkpoint(trainer, weights_only=weights_only or path.endswith(".safetensors"))
        trainer.strategy.save_checkpoint(checkpoint, path, storage_options=storage_options)


# -- restoring ----------------------------------------------------------------------------------------------
def select_ckpt_path(trainer: Trainer, ckpt_path: Any) -> Any:
    """``ckpt_path`` as passed to a stage, or the one set with ``trainer.ckpt_path = ...``: a path passed wins
    (with a warning) and ends the one set, as in Lightning."""
    managed = trainer._managed_ckpt_path
    if not managed:
        return ckpt_path
    if ckpt_path:
        rank_zero_warn(
            f"`trainer.ckpt_path = {managed!r}` was called but then you"
            f" passed `trainer.fit(ckpt_path={ckpt_path!r})`. The latter will be loaded."
        )
        trainer._managed_ckpt_path = None
        return ckpt_path
    return managed


def eval_ckpt_path(trainer: Trainer, model: Any, ckpt_path: Any) -> Any:
    """The checkpoint validate / test / predict load: ``ckpt_path``, or the one ``trainer.ckpt_path`` was set
    to; without either and without a model after a fit, the best checkpoint of that fit (as documented)."""
    ckpt_path = select_ckpt_path(trainer, ckpt_path)
    if ckpt_path is not None or model is not None:
        return ckpt_path
    cb = trainer.checkpoint_callback
    if cb is not None and getattr(cb, "best_model_path", None):
        rank_zero_warn("No model nor ckpt_path given. The best model of the previous `fit` call will be used.")
        return "best"
    if trainer.lightning_module is not None and trainer.state.fn == TrainerFn.FITTING:
        rank_zero_warn("No checkpoint of the last fit is known: the model's current weights are used.")
    return None


def resolve_ckpt_path(trainer: Trainer, ckpt_path: Any) -> str | None:
    """``"last"``, ``"best"`` or a path -> a file path (``None``: start from scratch)."""
    if ckpt_path is None:
        return None
    if ckpt_path == "best":
        cb = trainer.checkpoint_callback
        best = getattr(cb, "best_model_path", "") if cb is not None else ""
        if not best:
            raise ValueError(
                'ckpt_path="best" but no best checkpoint is known: the trainer is not configured to save the best model, or `ModelCheckpoint` is not configured. No ModelCheckpoint has saved one in this '
                "trainer. Run fit() with a ModelCheckpoint(monitor=...) first, or pass a file path."
            )
        ranked = [c for c in trainer.checkpoint_callbacks if hasattr(c, "best_model_path")]
        if len(ranked) > 1:  # each keeps its own best: the user may have meant another one
            fn = trainer.state.fn.value if trainer.state.fn is not None else "fit"
            rank_zero_warn(
                f'`.{fn}(ckpt_path="best")` with {len(ranked)} ModelCheckpoint callbacks uses the best checkpoint '
                f"path from first checkpoint callback in `callbacks`: {str(best)!r}. To use another one's, pass its "
                "`best_model_path` as `ckpt_path`."
            )
        return str(best)
    if ckpt_path == "last":
        candidates: list[str] = []
        for cb in trainer.checkpoint_callbacks:
            last = getattr(cb, "last_model_path", "")
            if last and cloud_io.exists(last):
                candidates.append(str(last))
            finder = getattr(cb, "find_last_checkpoints", None)
            if finder is not None:
                candidates.extend(finder(trainer))
        if not candidates:
            rank_zero_warn('ckpt_path="last" found no last checkpoint. No checkpoint will be loaded: training starts from scratch.')
            return None
        return max(candidates, key=cloud_io.modified)
    if not isinstance(ckpt_path, str | os.PathLike):
        raise MisconfigurationException(
            f"ckpt_path={ckpt_path!r} must be a file path, 'last', 'best' or None."
        )
    path = cloud_io.local(ckpt_path)
    cloud_io.check_reachable(path, "ckpt_path")
    if not cloud_io.exists(path):
        raise FileNotFoundError(f"Checkpoint file not found: ckpt_path={path!r}.")
    return path


def restore_module_and_callbacks(
    trainer: Trainer, checkpoint: dict[str, Any], callbacks: bool = True
) -> None:
    """Weights, module / datamodule hooks and callback states (before optimizers exist)."""
    module = trainer.lightning_module
    assert module is not None
    datamodule = trainer.datamodule
    hooks = trainer.run_context.hooks
    if datamodule is not None:
        hooks.call_datamodule("on_load_checkpoint", checkpoint)
        dm_state = checkpoint.get(type(datamodule).__qualname__)
        if dm_state:
            hooks.call_datamodule("load_state_dict", dm_state)
    hooks.call_module("on_load_checkpoint", checkpoint)
    if "state_dict" not in checkpoint:
        raise KeyError("The checkpoint has no 'state_dict' key: it is not a model checkpoint.")
    trainer.strategy.load_model_state_dict(checkpoint, strict=getattr(module, "strict_loading", True))
    if not callbacks:
        return
    hooks.call_callbacks("on_load_checkpoint", checkpoint)
    states = checkpoint.get("callbacks", {})
    used = set()
    for cb in trainer.callbacks:
        key = cb.state_key if cb.state_key in states else getattr(cb, "_legacy_state_key", None)
        state = states.get(key) if key else None
        if key in states:
            used.add(key)
        if state:
            cb.load_state_dict(state)
    missing = [k for k in states if k not in used]
    if missing and trainer.state.fn is not None and trainer.state.fn.value == "fit":
        rank_zero_warn(
            "The checkpoint holds the state of callbacks this trainer does not have, which is not restored: when "
            "resuming with `ckpt_path`, give the Trainer the callbacks that wrote the checkpoint again (the same "
            f"arguments make the same state key). Please add the following callbacks: {missing}."
        )


def _check_counts(ckpt_path: str, what: str, states: list[Any], targets: list[Any]) -> None:
    if len(states) != len(targets):
        raise MisconfigurationException(
            f"{ckpt_path!r} holds {len(states)} {what} states but configure_optimizers() returned "
            f"{len(targets)} {what}s. Resume with the configuration that wrote the checkpoint."
        )


def restore_training_state(trainer: Trainer, checkpoint: dict[str, Any], ckpt_path: str) -> None:
    """Optimizers, schedulers, precision and loop position (after ``configure_optimizers``)."""
    strategy = trainer.strategy
    if strategy.lightning_restore_optimizer:  # False: the strategy restores them itself
        if "optimizer_states" not in checkpoint:
            raise KeyError(
                f"{ckpt_path!r} holds no optimizer states (saved with weights_only=True?): it cannot resume "
                "training. Load the weights with Model.load_from_checkpoint() and start a new fit() instead."
            )
        _check_counts(ckpt_path, "optimizer", checkpoint["optimizer_states"], trainer.optimizers)
        strategy.load_optimizer_state_dict(checkpoint)
    schedulers = [cfg.scheduler for cfg in trainer.lr_scheduler_configs]
    _check_counts(ckpt_path, "LR scheduler", checkpoint.get("lr_schedulers", []), schedulers)
    for scheduler, state in zip(schedulers, checkpoint.get("lr_schedulers", [])):
        scheduler.load_state_dict(state)
    precision = trainer.precision_plugin
    # Lightning 1.x saved a GradScaler's state under "native_amp_scaling_state"
    precision_state = checkpoint.get(type(precision).__qualname__) or checkpoint.get(
        "native_amp_scaling_state"
    )
    if precision_state:
        precision.load_state_dict(precision_state)
    fit_state = checkpoint.get("loops", {}).get("fit_loop", {})
    loop_state = fit_state.get("state_dict", {})
    state = loop_state.get("fulmen")
    if state is None:
        state = resume.state_from_lightning(checkpoint)
    # the train loaders' own states live under Lightning's key, where both write and read them
    state = {**state, "loader_states": loop_state.get("combined_loader")}
    trainer.fit_loop.load_resume_state(state)
    max_epochs = trainer.max_epochs
    if max_epochs is not None and max_epochs != -1 and trainer.current_epoch > max_epochs:
        raise MisconfigurationException(
            f"You restored a checkpoint with current_epoch={trainer.current_epoch}, but you have set "
            f"Trainer(max_epochs={max_epochs}): the run would train nothing. Raise max_epochs above the epoch the "
            "checkpoint reached, or load only the weights (Model.load_from_checkpoint) for a new run."
        )
    log_restored(ckpt_path, fitting=True)


# The words of Lightning's messages, so that what users (and their log filters) look for is there: which file a
# run was restored from, once "best" / "last" are resolved to a path.
def log_restoring(ckpt_path: str) -> None:
    """Said as the checkpoint file is read, before any of it is restored."""
    rank_zero_info(f"Restoring states from the checkpoint path at {ckpt_path}")


def log_restored(ckpt_path: str, fitting: bool) -> None:
    """Said once the run is restored: for fit, all states (after ``on_fit_start``); for validate, test and
    predict, the weights (before their ``on_*_start`` hooks)."""
    what = "Restored all states" if fitting else "Loaded model weights"
    rank_zero_info(f"{what} from the checkpoint at {ckpt_path}")

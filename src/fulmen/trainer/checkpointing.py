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
from fulmen.utilities.migration import pl_legacy_patch
from fulmen.utilities.migration.utils import _pl_migrate_checkpoint
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
        precision.on_save_checkpoint(checkpoint)
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
    if ckpt_path == "hpc":  # the newest `hpc_ckpt_<n>.ckpt` in default_root_dir (written before a SLURM requeue)
        hpc = hpc_resume_path(trainer.default_root_dir)
        if hpc is None:
            fn = trainer.state.fn.value if trainer.state.fn is not None else "fit"
            raise ValueError(
                f'`.{fn}(ckpt_path="hpc")` is set but no HPC checkpoint (hpc_ckpt_<n>.ckpt) was found in '
                f"{str(trainer.default_root_dir)!r}. Pass an exact checkpoint path to `.{fn}(ckpt_path=...)`."
            )
        return hpc
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


class CheckpointConnector:
    """Restores a run from a checkpoint file, in the steps a stage needs them (``trainer._checkpoint_connector``).

    The stage runner drives it: ``resume_start`` reads the file, ``restore_model`` / ``restore_datamodule`` /
    ``restore_callbacks`` run before the optimizers exist, ``restore_training_state`` (optimizers, schedulers,
    precision, loop position) after ``on_fit_start``, and ``resume_end`` lets the file go. Callbacks use the same
    steps to restore another checkpoint in the middle of a fit (finetuning-scheduler reloads the best one at each
    phase): the names, arguments and order are Lightning's ``_CheckpointConnector``'s, so such code runs as is.
    """

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        self._ckpt_path: str | os.PathLike[str] | None = None
        self._loaded_checkpoint: dict[str, Any] = {}

    # -- HPC checkpoints: `hpc_ckpt_<n>.ckpt` in default_root_dir, the newest resumed first under SLURM -----------
    @property
    def _hpc_resume_path(self) -> str | None:
        """The newest ``hpc_ckpt_<n>.ckpt`` in the trainer's ``default_root_dir`` (``None``: none there)."""
        return hpc_resume_path(self.trainer.default_root_dir)

    @staticmethod
    def hpc_save_path(folderpath: str | os.PathLike[str]) -> str:
        """Where the next HPC checkpoint of ``folderpath`` goes: ``hpc_ckpt_<n+1>.ckpt`` after the highest number
        there (``hpc_ckpt_1.ckpt`` in an empty folder)."""
        version = _max_version(folderpath, "ckpt_")
        return os.path.join(folderpath, f"hpc_ckpt_{(version or 0) + 1}.ckpt")

    @staticmethod
    def __max_ckpt_version_in_folder(dir_path: str | os.PathLike[str], name_key: str = "ckpt_") -> int | None:
        """The highest number after ``name_key`` among the names in ``dir_path`` (Lightning's helper, which its
        tests call by its mangled name)."""
        return _max_version(dir_path, name_key)

    # -- reading the file --------------------------------------------------------------------------------------
    def resume_start(self, checkpoint_path: str | os.PathLike[str] | None = None, weights_only: bool | None = None) -> None:
        """Read ``checkpoint_path`` (a resolved file path; ``None``: nothing to restore) into memory."""
        self._ckpt_path = checkpoint_path
        self._loaded_checkpoint = {}  # a file read earlier and never released is not restored again
        if not checkpoint_path:
            return
        log_restoring(str(checkpoint_path))
        with pl_legacy_patch():  # a file of an old Lightning version may have pickled its objects
            checkpoint = self.trainer.strategy.load_checkpoint(checkpoint_path, weights_only=weights_only)
        self._loaded_checkpoint = _pl_migrate_checkpoint(checkpoint, checkpoint_path)  # an old layout -> today's

    def resume_end(self) -> None:
        """The restore is over: say so, let the file's contents go, and wait for the other processes."""
        if self._ckpt_path:
            log_restored(str(self._ckpt_path), fitting=self.trainer.state.fn == TrainerFn.FITTING)
        self._loaded_checkpoint = {}
        self.trainer.strategy.barrier("_CheckpointConnector.resume_end")

    def restore(self, checkpoint_path: str | os.PathLike[str] | None = None, weights_only: bool | None = None) -> None:
        """Everything at once: weights, datamodule, callbacks and (when fitting) the training state."""
        self.resume_start(checkpoint_path, weights_only=weights_only)
        self.restore_datamodule()
        self.restore_model()
        self.restore_callbacks()
        self.restore_training_state()
        self.resume_end()

    @property
    def ckpt_path(self) -> str | os.PathLike[str] | None:
        """The file the last restore read (``trainer.ckpt_path``); kept after ``resume_end``."""
        return self._ckpt_path

    def restore_modules_and_callbacks(
        self, checkpoint_path: str | os.PathLike[str] | None = None, weights_only: bool | None = None
    ) -> None:
        """The part restored when a stage sets up, before the optimizers exist."""
        self.resume_start(checkpoint_path, weights_only=weights_only)
        self.restore_datamodule()
        self.restore_model()
        if self.trainer.state.fn == TrainerFn.FITTING:  # evaluation keeps the callbacks it was given
            self.restore_callbacks()

    _restore_modules_and_callbacks = restore_modules_and_callbacks  # Lightning's name

    # -- before the optimizers exist ---------------------------------------------------------------------------
    def restore_datamodule(self) -> None:
        checkpoint, datamodule = self._loaded_checkpoint, self.trainer.datamodule
        if not checkpoint or datamodule is None:
            return
        hooks = self.trainer.run_context.hooks
        hooks.call_datamodule("on_load_checkpoint", checkpoint)
        dm_state = checkpoint.get(type(datamodule).__qualname__)
        if dm_state:
            hooks.call_datamodule("load_state_dict", dm_state)

    def restore_model(self) -> None:
        """The module's ``on_load_checkpoint`` (it may edit the contents), then its weights."""
        checkpoint = self._loaded_checkpoint
        if not checkpoint:
            return
        module = self.trainer.lightning_module
        self.trainer.run_context.hooks.call_module("on_load_checkpoint", checkpoint)
        if "state_dict" not in checkpoint:
            raise KeyError("The checkpoint has no 'state_dict' key: it is not a model checkpoint.")
        self.trainer.strategy.load_model_state_dict(checkpoint, strict=getattr(module, "strict_loading", True))

    def restore_callbacks(self) -> None:
        checkpoint = self._loaded_checkpoint
        if not checkpoint:
            return
        trainer = self.trainer
        trainer.run_context.hooks.call_callbacks("on_load_checkpoint", checkpoint)
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
        if missing and trainer.state.fn == TrainerFn.FITTING:
            rank_zero_warn(
                "The checkpoint holds the state of callbacks this trainer does not have, which is not restored: "
                "when resuming with `ckpt_path`, give the Trainer the callbacks that wrote the checkpoint again (the "
                f"same arguments make the same state key). Please add the following callbacks: {missing}."
            )

    # -- after configure_optimizers and on_fit_start -----------------------------------------------------------
    def restore_training_state(self) -> None:
        """Optimizers, schedulers, precision and loop position; outside fit only precision and loops."""
        if not self._loaded_checkpoint:
            return
        if self.trainer.state.fn == TrainerFn.FITTING:
            self.restore_optimizers_and_schedulers()
        self.restore_precision_plugin_state()
        self.restore_loops()

    def restore_optimizers_and_schedulers(self) -> None:
        checkpoint = self._loaded_checkpoint
        if not checkpoint:
            return
        if self.trainer.strategy.lightning_restore_optimizer:  # False: the strategy restores them itself
            if "optimizer_states" not in checkpoint:
                raise KeyError(
                    f"{str(self._ckpt_path)!r} holds no optimizer states (saved with weights_only=True?): it cannot "
                    "resume training. Load the weights with Model.load_from_checkpoint() and start a new fit() "
                    "instead."
                )
            self.restore_optimizers()
        if "lr_schedulers" not in checkpoint:
            raise KeyError(
                f"{str(self._ckpt_path)!r} holds no learning-rate scheduler states (saved with weights_only=True?): "
                "it cannot resume training. Load the weights with Model.load_from_checkpoint() and start a new "
                "fit() instead."
            )
        self.restore_lr_schedulers()

    def restore_optimizers(self) -> None:
        checkpoint = self._loaded_checkpoint
        if not checkpoint:
            return
        _check_counts(str(self._ckpt_path), "optimizer", checkpoint["optimizer_states"], self.trainer.optimizers)
        self.trainer.strategy.load_optimizer_state_dict(checkpoint)

    def restore_lr_schedulers(self) -> None:
        checkpoint = self._loaded_checkpoint
        if not checkpoint:
            return
        schedulers = [cfg.scheduler for cfg in self.trainer.lr_scheduler_configs]
        states = checkpoint["lr_schedulers"]
        _check_counts(str(self._ckpt_path), "LR scheduler", states, schedulers)
        for scheduler, state in zip(schedulers, states):
            scheduler.load_state_dict(state)

    def restore_precision_plugin_state(self) -> None:
        checkpoint = self._loaded_checkpoint
        precision = self.trainer.precision_plugin
        precision.on_load_checkpoint(checkpoint)
        # Lightning 1.x saved a GradScaler's state under "native_amp_scaling_state"
        state = checkpoint.get(type(precision).__qualname__) or checkpoint.get("native_amp_scaling_state")
        if state:
            precision.load_state_dict(state)

    def restore_loops(self) -> None:
        """The fit loop's position (Lightning's progress counters and fulmen's exact-resume state)."""
        checkpoint, trainer = self._loaded_checkpoint, self.trainer
        if not checkpoint or trainer.state.fn != TrainerFn.FITTING:
            return
        loop_state = checkpoint.get("loops", {}).get("fit_loop", {}).get("state_dict", {})
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
                f"Trainer(max_epochs={max_epochs}): the run would train nothing. Raise max_epochs above the epoch "
                "the checkpoint reached, or load only the weights (Model.load_from_checkpoint) for a new run."
            )

    def dump_checkpoint(self, weights_only: bool | None = None) -> dict[str, Any]:
        return dump_checkpoint(self.trainer, weights_only=bool(weights_only))


def _check_counts(ckpt_path: str, what: str, states: list[Any], targets: list[Any]) -> None:
    if len(states) != len(targets):
        raise MisconfigurationException(
            f"{ckpt_path!r} holds {len(states)} {what} states but configure_optimizers() returned "
            f"{len(targets)} {what}s. Resume with the configuration that wrote the checkpoint."
        )


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


def hpc_resume_path(folder: str | os.PathLike[str]) -> str | None:
    """The newest ``hpc_ckpt_<n>.ckpt`` in ``folder`` (``None``: none there)."""
    version = _max_version(folder, "hpc_ckpt_")
    return None if version is None else cloud_io.join(str(folder), f"hpc_ckpt_{version}.ckpt")


def _max_version(folder: str | os.PathLike[str], name_key: str) -> int | None:
    """The highest number in the names of ``folder`` that contain ``name_key`` (the digits after it:
    ``hpc_ckpt_12.ckpt`` -> 12); ``None`` when there is no such name (or no folder)."""
    versions = []
    for name in cloud_io.listdir(folder):
        if name_key in name:
            digits = "".join(ch for ch in name.split(name_key)[-1] if ch.isdigit())
            if digits:  # a name with no number (`hpc_ckpt_last.ckpt`) is no version
                versions.append(int(digits))
    return max(versions) if versions else None

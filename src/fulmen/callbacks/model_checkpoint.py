"""``ModelCheckpoint``: save the top-k and the last checkpoints of a run, by step, epoch or time.

Rotation writes the new file first and deletes the one it replaces only afterwards, and it never deletes the
checkpoint the run resumed from nor anything outside ``dirpath``.
"""

import contextlib
import datetime
import math
import os as os  # Lightning's module holds it: `save_last="link"` links with its `os.symlink` (cloud_io.link)
import re
import time  # read when the callback runs: `train_time_interval` is timed with this module's `time.monotonic`
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from fulmen.callbacks.checkpoint import Checkpoint
from fulmen.callbacks.file_naming import _FIELD as _FIELD  # importable from here as before
from fulmen.callbacks.file_naming import CheckpointFileNaming
from fulmen.callbacks.save_arguments import check_save_arguments
from fulmen.checkpoint import sharded as distributed_checkpoint  # noqa: F401  (importable here as before)
from fulmen.utilities import cloud_io
from fulmen.utilities.cloud_io import get_filesystem as get_filesystem
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.migration.migration import holds_legacy_state
from fulmen.utilities.rank_zero import WarningCache, rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

warning_cache = WarningCache()  # Lightning's module-level cache, for code that warns through it

# Lightning's words (users filter on them) for a step-triggered save under manual optimization
_MANUAL_STEP_ADVICE = (
    "Using ModelCheckpoint with manual optimization and every_n_train_steps, but no pre-optimization state was "
    "saved. The checkpoint will contain the model state AFTER optimization. To save the pre-optimization "
    "state, save the model state in training_step before optimizer.step(). Example:\n"
    "def training_step(self, batch, batch_idx):\n"
    "    # ... forward pass, loss calculation, backward pass ...\n"
    "    # Save model state before optimization\n"
    "    if not hasattr(self, 'saved_models'):\n"
    "        self.saved_models = {}\n"
    "    self.saved_models[batch_idx] = {\n"
    "        k: v.detach().clone() for k, v in self.layer.state_dict().items()\n"
    "    }\n"
    "    # Then perform optimization\n"
    "    optimizer.zero_grad()\n"
    "    self.manual_backward(loss)\n"
    "    optimizer.step()"
)


@holds_legacy_state  # a pre-0.10 checkpoint's top-level keys hold its state
class ModelCheckpoint(CheckpointFileNaming, Checkpoint):
    CHECKPOINT_JOIN_CHAR = "-"
    CHECKPOINT_EQUALS_CHAR = "="
    CHECKPOINT_NAME_LAST = "last"
    FILE_EXTENSION = ".ckpt"
    STARTING_VERSION = 1

    def __init__(
        self,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: bool | Literal["link"] | None = None,
        save_top_k: int = 1,
        save_on_exception: bool = False,
        save_weights_only: bool = False,
        mode: str = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: int | None = None,
        train_time_interval: datetime.timedelta | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
    ) -> None:
        # cooperative, as Lightning's: a subclass that also inherits a mixin (finetuning-scheduler's FTSCheckpoint)
        # relies on this call reaching the mixin's __init__
        super().__init__()
        set_triggers = check_save_arguments(
            monitor=monitor, save_last=save_last, save_top_k=save_top_k, mode=mode,
            every_n_train_steps=every_n_train_steps, every_n_epochs=every_n_epochs,
            train_time_interval=train_time_interval,
        )  # fmt: skip
        cloud_io.check_reachable(dirpath, "ModelCheckpoint(dirpath)")
        self.dirpath: str | None = cloud_io.normalize(dirpath) if dirpath is not None else None
        self.filename = filename
        self.monitor = monitor
        self.verbose = verbose
        self.save_last = save_last
        self.save_top_k = save_top_k
        self.save_on_exception = save_on_exception
        self.save_weights_only = save_weights_only
        self.mode = mode
        self.auto_insert_metric_name = auto_insert_metric_name
        self._save_on_train_epoch_end = save_on_train_epoch_end
        self._enable_version_counter = enable_version_counter
        if not set_triggers:
            every_n_epochs = 1 if every_n_epochs is None else every_n_epochs
        self._every_n_train_steps = every_n_train_steps or 0
        self._every_n_epochs = every_n_epochs or 0
        self._train_time_interval = train_time_interval
        self._last_time_checked: float | None = None
        self._last_global_step_saved = 0  # no checkpoint before the first step
        self._wrote_last_this_fit = False
        self._retired: list[str] = []  # top-k files replaced by this save, removed once it is complete
        self._last_checkpoint_saved = ""
        self._warnings = WarningCache()
        self.current_score: torch.Tensor | None = None
        self.best_k_models: dict[str, torch.Tensor] = {}
        self.kth_best_model_path = ""
        self.best_model_score: torch.Tensor | None = None
        self.best_model_path = ""
        self.last_model_path = ""
        self.kth_value = torch.tensor(math.inf if mode == "min" else -math.inf)

    @property
    def state_key(self) -> str:
        return self._generate_state_key(
            monitor=self.monitor, mode=self.mode, every_n_train_steps=self._every_n_train_steps,
            every_n_epochs=self._every_n_epochs, train_time_interval=self._train_time_interval,
        )  # fmt: skip

    @property
    def every_n_epochs(self) -> int:
        return self._every_n_epochs

    @property
    def every_n_train_steps(self) -> int:
        return self._every_n_train_steps

    # -- hooks -----------------------------------------------------------------------------------------
    def setup(self, trainer: "Trainer", pl_module: "LightningModule", stage: str) -> None:
        dirpath = self.dirpath if self.dirpath is not None else self._default_dirpath(trainer)
        self.dirpath = trainer.strategy.broadcast(cloud_io.normalize(dirpath))
        if stage != "fit" or not trainer.is_global_zero or not cloud_io.isdir(self.dirpath):
            return
        _remove_stale_temporaries(self.dirpath)
        if trainer.run_context.checkpoint_request.path is None and cloud_io.listdir(self.dirpath):
            rank_zero_warn(f"Checkpoint directory {self.dirpath} exists and is not empty.")

    def on_train_start(self, trainer: "Trainer", pl_module: "LightningModule") -> None:
        self._last_time_checked = time.monotonic()
        self._wrote_last_this_fit = False

    def on_train_batch_end(
        self, trainer: "Trainer", pl_module: "LightningModule", outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if self._every_n_train_steps < 1 and self._train_time_interval is None:
            return  # saves at epoch or validation ends only: nothing to decide per batch
        if self._skip(trainer):
            return
        skip_batch = self._every_n_train_steps < 1 or trainer.global_step % self._every_n_train_steps != 0
        skip_time = True
        interval = self._train_time_interval
        if interval is not None and self._last_time_checked is not None:
            now = time.monotonic()
            skip_time = now - self._last_time_checked < interval.total_seconds()
            skip_time = trainer.strategy.reduce_boolean_decision(skip_time, all=True)
            if not skip_time:
                self._last_time_checked = now
        if skip_batch and skip_time:
            return
        if not skip_batch and not pl_module.automatic_optimization:
            self._save_after_manual_step(trainer, pl_module)
            return
        self._save(trainer, by_step=True)

    def _save_after_manual_step(self, trainer: "Trainer", pl_module: "LightningModule") -> None:
        """A step-triggered save under manual optimization, as Lightning does it: the weights are those after
        ``optimizer.step()`` (said in a warning), unless ``training_step`` kept the state of ``self.layer``
        from before the step in ``self.saved_models[batch_idx]`` (the recipe the warning gives): the latest
        of those is saved instead. A monitored metric not logged yet leaves the save to validation."""
        if self.monitor is not None and self.monitor not in self._monitor_candidates(trainer):
            return
        saved = getattr(pl_module, "saved_models", None)
        layer = getattr(pl_module, "layer", None)
        if not (isinstance(saved, dict) and saved and isinstance(layer, torch.nn.Module)):
            if trainer.is_global_zero:
                rank_zero_warn(_MANUAL_STEP_ADVICE, category=UserWarning)
            self._save(trainer, by_step=True)
            return
        before = saved[max(saved)]
        if not isinstance(before, dict):
            raise TypeError("Saved model state must be a dictionary")
        with torch.no_grad():
            after = {k: v.detach().clone() for k, v in layer.state_dict().items()}
            try:
                layer.load_state_dict(before)
                self._save(trainer, by_step=True)
            finally:
                layer.load_state_dict(after)

    def on_train_epoch_end(self, trainer: "Trainer", pl_module: "LightningModule") -> None:
        if (
            not self._skip(trainer)
            and self._should_save_on_train_epoch_end(trainer)
            and self._epoch_due(trainer)
        ):
            self._save(trainer)

    def on_validation_end(self, trainer: "Trainer", pl_module: "LightningModule") -> None:
        if (
            not self._skip(trainer)
            and not self._should_save_on_train_epoch_end(trainer)
            and self._epoch_due(trainer)
        ):
            self._save(trainer)

    def on_exception(self, trainer: "Trainer", pl_module: "LightningModule", exception: BaseException) -> None:
        if not self.save_on_exception or self.dirpath is None or trainer.state.fn is None:
            return
        if trainer.lightning_module is None or self._skip(trainer):
            return  # not fitting, a sanity check or fast_dev_run, or this step is already saved
        # named as the callback names its checkpoints (Lightning's choice), so `filename` controls it
        path = self.format_checkpoint_name(self._monitor_candidates(trainer))
        trainer.save_checkpoint(path, self.save_weights_only)
        self._last_global_step_saved = trainer.global_step
        rank_zero_info(f"{type(exception).__name__} was raised ({exception}); saved a checkpoint to {path}")

    def state_dict(self) -> dict[str, Any]:
        return {
            "monitor": self.monitor, "best_model_score": self.best_model_score,
            "best_model_path": self.best_model_path, "current_score": self.current_score,
            "dirpath": self.dirpath, "best_k_models": dict(self.best_k_models),
            "kth_best_model_path": self.kth_best_model_path, "kth_value": self.kth_value,
            "last_model_path": self.last_model_path,
        }  # fmt: skip

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved_dir = state_dict.get("dirpath")
        same_dir = (
            saved_dir is not None and self.dirpath is not None and cloud_io.normalize(saved_dir) == self.dirpath
        )
        if same_dir:
            self.best_k_models = dict(state_dict.get("best_k_models", {}))
            self.kth_best_model_path = state_dict.get("kth_best_model_path", "")
            self.kth_value = state_dict.get("kth_value", self.kth_value)
            self.current_score = state_dict.get("current_score")
            self.last_model_path = state_dict.get("last_model_path", "")
        else:
            rank_zero_warn(
                f"The dirpath has changed from {saved_dir!r} to {self.dirpath!r}: the checkpoint was written with another ModelCheckpoint(dirpath); this run saves to "
                f"{self.dirpath!r}, so only best_model_path/score are restored and top-k starts afresh."
            )
        self.best_model_score = state_dict.get("best_model_score")
        self.best_model_path = state_dict.get("best_model_path", "")

    # -- decisions -------------------------------------------------------------------------------------
    def _skip(self, trainer: "Trainer") -> bool:
        fn = trainer.state.fn
        return (
            bool(trainer.fast_dev_run)
            or fn is None
            or fn.value != "fit"
            or trainer.sanity_checking
            or self._last_global_step_saved == trainer.global_step
        )

    def _skip_at_end(self, trainer: "Trainer") -> bool:
        fn = trainer.state.fn
        return bool(trainer.fast_dev_run) or fn is None or fn.value != "fit"

    def _epoch_due(self, trainer: "Trainer") -> bool:
        return self._every_n_epochs >= 1 and (trainer.current_epoch + 1) % self._every_n_epochs == 0

    def _should_save_on_train_epoch_end(self, trainer: "Trainer") -> bool:
        if self._save_on_train_epoch_end is not None:
            return self._save_on_train_epoch_end
        if trainer.check_val_every_n_epoch != 1:
            return False  # validation does not run every epoch: save after the validation runs
        if sum(trainer.num_val_batches) == 0:
            return True  # no validation: the epoch end is the only place
        return trainer.val_check_interval == 1.0  # several validations per epoch: save after each

    def check_monitor_top_k(self, trainer: "Trainer", current: torch.Tensor | None = None) -> bool:
        if current is None:
            return False
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        better = torch.lt if self.mode == "min" else torch.gt
        return bool(better(current, self.kth_value.to(current.device)))

    # -- saving ----------------------------------------------------------------------------------------
    def _monitor_candidates(self, trainer: "Trainer") -> dict[str, Any]:
        candidates = dict(trainer.callback_metrics)
        candidates.setdefault("epoch", torch.tensor(trainer.current_epoch))
        candidates.setdefault("step", torch.tensor(trainer.global_step))
        return candidates

    def on_train_end(self, trainer: "Trainer", pl_module: "LightningModule") -> None:
        """``save_last``: a run that wrote no last checkpoint (top-k off, nothing monitored improved, no
        validation, a ``max_steps`` before the first trigger) writes one now, as Lightning 2.6 does."""
        if self.save_last and not self._wrote_last_this_fit and not self._skip_at_end(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save(self, trainer: "Trainer", by_step: bool = False) -> None:
        """Top-k, then last. ``save_last`` copies every step-triggered save; an epoch-triggered save (end of
        epoch / validation) updates last only when a top-k file was written (the behaviour of Lightning 2.6,
        checked against it in the parity tests); the end of training writes one if none was."""
        candidates = self._monitor_candidates(trainer)
        if trainer.world_size > 1:
            # every rank acts on rank 0's values: they agree on whether and under which name to save, which a
            # sharded save (every rank writes) needs, and which keeps best_model_path the same on every rank
            # (as numbers: pickling a tensor goes through torch.save, which a user's code may be watching)
            candidates = trainer.strategy.broadcast({k: _plain(v) for k, v in candidates.items()}, src=0)
        saved_before = self._last_checkpoint_saved
        self._save_topk_checkpoint(trainer, candidates)
        wrote_top_k = self._last_checkpoint_saved != saved_before or (
            self.save_top_k != 0 and self.monitor is None
        )
        if by_step or wrote_top_k:
            self._save_last_checkpoint(trainer, candidates)
        # replaced top-k files go only now: a last.ckpt link has moved off them, so it never dangles
        retired, self._retired = self._retired, []
        for path in retired:
            self._remove(trainer, path)
        self._last_global_step_saved = trainer.global_step

    def _write(self, trainer: "Trainer", path: str, names: str | None = None) -> None:
        """Save to ``path``. ``names``: the attribute (best_model_path / last_model_path) that points at the
        file, set before saving: the callback state inside the file then names the file itself, so a run
        resumed from it goes on rotating the same files (not ``last-v1.ckpt`` beside ``last.ckpt``)."""
        before = getattr(self, names) if names else None
        if names:
            setattr(self, names, path)
        try:
            if names == "last_model_path" and self._link_last():
                # through the strategy's CheckpointIO: a save still being written in the background is complete
                # before the link points at it, so last.ckpt never names a file that is not there
                trainer.strategy.link_checkpoint(self._last_checkpoint_saved, path)
            else:
                trainer.save_checkpoint(path, self.save_weights_only)
                for logger in trainer.loggers:  # e.g. MLflow / W&B upload checkpoints (log_model)
                    logger.after_save_checkpoint(self)
        except BaseException:
            if names:
                setattr(self, names, before)  # nothing was written: keep naming the file that was
            raise
        if names != "last_model_path":
            self._last_checkpoint_saved = path

    def _link_last(self) -> bool:
        return self.save_last == "link" and bool(self._last_checkpoint_saved) and self.save_top_k != 0

    def _save_topk_checkpoint(self, trainer: "Trainer", candidates: dict[str, Any]) -> None:
        if self.save_top_k == 0:
            return
        if self.monitor is None:
            # after a resume, best_model_path (restored) names the file this one replaces
            previous = self.best_model_path if self.save_top_k == 1 else ""
            path = self._versioned_path(trainer, candidates, None, keep=previous or None)
            self._write(trainer, path, names="best_model_path")
            if previous and previous != path:
                self._retired.append(previous)
            return
        current = candidates.get(self.monitor)
        if current is None:
            # Lightning's words (programs match on them), said once per process as its module-level cache does
            message = (
                f"`ModelCheckpoint(monitor={self.monitor!r})` could not find the monitored key in the returned"
                f" metrics: {list(candidates)}. HINT: Did you call `log({self.monitor!r}, value)` in the"
                " `LightningModule`?"
            )
            if trainer.validate_loop.has_run:
                raise MisconfigurationException(message)
            warning_cache.warn(message)
            return
        current = torch.as_tensor(current).detach().float().cpu()
        if self.check_monitor_top_k(trainer, current):
            self._update_best_and_save(current, trainer, candidates)
        elif self.verbose:
            rank_zero_info(
                f"Epoch {trainer.current_epoch}, global step {trainer.global_step}: {self.monitor!r} was not in "
                f"the top {self.save_top_k}"
            )

    def _update_best_and_save(
        self, current: torch.Tensor, trainer: "Trainer", candidates: dict[str, Any]
    ) -> None:
        k = len(self.best_k_models) + 1 if self.save_top_k == -1 else self.save_top_k
        replaced = ""
        if len(self.best_k_models) == k and k > 0:
            replaced = self.kth_best_model_path
            self.best_k_models.pop(replaced, None)
        if torch.isnan(current):
            current = torch.tensor(math.inf if self.mode == "min" else -math.inf)
        path = self._versioned_path(trainer, candidates, None, keep=replaced or None)
        self.current_score = current
        self.best_k_models[path] = current
        pick_worst, pick_best = (max, min) if self.mode == "min" else (min, max)
        if len(self.best_k_models) == k:
            self.kth_best_model_path = pick_worst(self.best_k_models, key=self.best_k_models.__getitem__)
            self.kth_value = self.best_k_models[self.kth_best_model_path]
        self.best_model_path = pick_best(self.best_k_models, key=self.best_k_models.__getitem__)
        self.best_model_score = self.best_k_models[self.best_model_path]
        if self.verbose:
            rank_zero_info(
                f"Epoch {trainer.current_epoch}, global step {trainer.global_step}: {self.monitor!r} reached "
                f"{float(current):.5f} (best {float(self.best_model_score):.5f}), saving model to {path!r} as top {k}"
            )
        self._write(trainer, path)  # the new file is in place before the one it replaces goes
        if replaced and replaced != path:
            self._retired.append(replaced)

    def _save_last_checkpoint(self, trainer: "Trainer", candidates: dict[str, Any]) -> None:
        if self.save_last:
            self._rotate_last(trainer, candidates)
            self._wrote_last_this_fit = True

    def save_interrupt_checkpoint(self, trainer: "Trainer") -> str:
        """A last checkpoint now (on SIGTERM / Ctrl-C), so ``ckpt_path="last"`` continues from here."""
        return self._rotate_last(trainer, self._monitor_candidates(trainer))

    def _rotate_last(self, trainer: "Trainer", candidates: dict[str, Any]) -> str:
        previous = self.last_model_path
        path = self._versioned_path(trainer, candidates, self.CHECKPOINT_NAME_LAST, keep=previous or None)
        self._write(trainer, path, names="last_model_path")
        if previous and previous != path:
            self._remove(trainer, previous)
        return path

    def _remove(self, trainer: "Trainer", path: str) -> None:
        """Delete a rotated-out checkpoint, unless it is the resume source or lies outside ``dirpath``."""
        if not trainer.is_global_zero or self.dirpath is None:
            return
        real = cloud_io.normalize(path)
        if trainer.ckpt_path is not None and real == cloud_io.normalize(trainer.ckpt_path):
            return
        if cloud_io.dirname(real) != cloud_io.normalize(self.dirpath):
            return
        # with save_last="link", last.ckpt names the newest top-k file: read from the callback, not the disk,
        # where a link queued behind a background save may still name the file being retired
        last = self._last_checkpoint_saved if self._link_last() else self.last_model_path
        if real in {cloud_io.normalize(p) for p in (self.best_model_path, last) if p}:
            return
        trainer.strategy.remove_checkpoint(path)  # through its CheckpointIO: after a pending async save

    def to_yaml(self, filepath: str | Path | None = None) -> None:
        import yaml

        best = {k: float(v) for k, v in self.best_k_models.items()}
        target = filepath or cloud_io.join(self.dirpath or ".", "best_k_models.yaml")
        cloud_io.write_text(target, yaml.dump(best))


_TEMPORARY = re.compile(r"^\..+\.tmp$")


def _remove_stale_temporaries(dirpath: str) -> None:
    """Drop half-written files a killed run left behind (``.<name>.<random>.tmp``, see checkpoint_io)."""
    for name in cloud_io.listdir(dirpath):
        if _TEMPORARY.match(name) and name.count(".") >= 3:
            with contextlib.suppress(OSError):
                cloud_io.remove(cloud_io.join(dirpath, name))


def _plain(value: Any) -> Any:
    """A one-element tensor as the Python number it holds (other values unchanged)."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.detach().cpu()
    return value

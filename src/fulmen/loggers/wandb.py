"""``WandbLogger``: Weights & Biases runs (``pip install 'fulmen[wandb]'``; ``wandb`` is imported when the
logger is first used). Works offline: ``offline=True`` or ``WANDB_MODE=offline`` writes the run under
``<save_dir>/wandb/`` for a later ``wandb sync``."""

from __future__ import annotations

import os
from argparse import Namespace
from typing import Any, Literal

from fulmen.loggers.logger import (
    CheckpointUploads,
    Logger,
    checkpoint_metadata,
    rank_zero_experiment,
    scan_checkpoints,
)
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import RequirementCache, require
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.imports import optional_packages as _optional_packages
from fulmen.utilities.rank_zero import rank_zero_only, rank_zero_warn

# whether the logger's package is installed, where programs and test suites written for Lightning look
# (evaluated when read, so importing this module imports no package)
_WANDB_AVAILABLE = RequirementCache("wandb>=0.12.10")


class WandbLogger(CheckpointUploads, Logger):
    """Log to a W&B run in ``project`` (default "lightning_logs"), named ``name``; ``version`` / ``id``
    resumes a run. Metrics are logged with ``trainer/global_step`` as their step axis; hyperparameters go to
    the run's config (nested dicts kept). ``log_model``: ``True`` logs the checkpoints as ``model``
    artifacts when training ends (as they are saved when ``save_top_k=-1``), ``"all"`` as each is saved;
    each artifact holds ``model.ckpt`` with the score and callback settings as metadata, aliased "latest"
    (and "best"). Extra keyword arguments go to ``wandb.init``."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | os.PathLike[str] = ".",
        version: str | None = None,
        offline: bool = False,
        dir: str | os.PathLike[str] | None = None,
        id: str | None = None,
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: Literal["all"] | bool = False,
        experiment: Any = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        add_file_policy: Literal["mutable", "immutable"] = "mutable",
        **kwargs: Any,
    ) -> None:
        require("wandb", "wandb", "WandbLogger", available=_WANDB_AVAILABLE)
        if offline and log_model:
            raise MisconfigurationException(
                f"WandbLogger(offline=True, log_model={log_model!r}): an offline run cannot upload checkpoints. "
                "Set log_model=False, or log online (or with WANDB_MODE=offline, whose artifacts `wandb sync` "
                "uploads later)."
            )
        if log_model not in (True, False, "all"):
            raise ValueError(f"WandbLogger(log_model={log_model!r}) must be True, False or 'all'.")
        project = project or os.environ.get("WANDB_PROJECT", "lightning_logs")
        save_dir = os.fspath(save_dir) if save_dir is not None else None
        dir = os.fspath(dir) if dir is not None else None
        self._offline = offline
        self._log_model = log_model
        self._prefix = prefix
        self._experiment = experiment
        self._logged_model_time: dict[str, float] = {}
        self._checkpoint_callback: Any = None
        self._checkpoint_name = checkpoint_name
        self._add_file_policy = add_file_policy
        self._project = project
        self._save_dir = save_dir or dir
        self._name = name
        self._id = version or id
        self._wandb_init: dict[str, Any] = dict(
            name=name, project=project, dir=self._save_dir, id=self._id, resume="allow",
            anonymous="allow" if anonymous else None, **kwargs,
        )  # fmt: skip
        if offline:
            self._wandb_init.setdefault("mode", "offline")

    def __getstate__(self) -> dict[str, Any]:
        # a spawned worker makes its own run object; the id makes it the same run
        state = dict(self.__dict__)
        if self._experiment is not None:
            state["_id"] = getattr(self._experiment, "id", self._id)
            state["_wandb_init"] = {**self._wandb_init, "id": state["_id"]}
        state["_experiment"] = None
        return state

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The ``wandb`` run (started on first use; an already running ``wandb.run`` is reused)."""
        if self._experiment is not None:
            return self._experiment
        wandb = _package("wandb")
        init = {k: v for k, v in self._wandb_init.items() if v is not None}
        if self._save_dir is not None:
            os.makedirs(self._save_dir, exist_ok=True)
            # absolute: wandb resolves a relative dir against the working directory of its first run
            init["dir"] = os.path.abspath(self._save_dir)
        if wandb.run is not None:
            rank_zero_warn(
                "A wandb run is already in progress: this WandbLogger logs to it. Call wandb.finish() before "
                "making the logger to start a new run."
            )
            self._experiment = wandb.run
        else:
            self._experiment = wandb.init(**init)
        if hasattr(self._experiment, "define_metric"):
            self._experiment.define_metric("trainer/global_step")
            self._experiment.define_metric("*", step_metric="trainer/global_step", step_sync=True)
        return self._experiment

    @property
    def name(self) -> str | None:
        return self._project

    @property
    def version(self) -> str | None:
        return self._experiment.id if self._experiment is not None else self._id

    @property
    def save_dir(self) -> str | None:
        return self._save_dir

    def watch(self, model: Any, log: str | None = "gradients", log_freq: int = 100, log_graph: bool = True) -> None:
        self.experiment.watch(model, log=log, log_freq=log_freq, log_graph=log_graph)

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        params = vars(params) if isinstance(params, Namespace) else dict(params)
        self.experiment.config.update(_plain(params), allow_val_change=True)

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        if self._prefix:
            metrics = {f"{self._prefix}{self.LOGGER_JOIN_CHAR}{k}": v for k, v in metrics.items()}
        if step is not None:
            self.experiment.log({**metrics, "trainer/global_step": step})
        else:
            self.experiment.log(dict(metrics))

    @rank_zero_only
    def log_table(self, key: str, columns: list[str] | None = None, data: list[list[Any]] | None = None,
                  dataframe: Any = None, step: int | None = None) -> None:  # fmt: skip
        wandb = _package("wandb")
        self.log_metrics({key: wandb.Table(columns=columns, data=data, dataframe=dataframe)}, step)

    @rank_zero_only
    def log_text(self, key: str, columns: list[str] | None = None, data: list[list[str]] | None = None,
                 dataframe: Any = None, step: int | None = None) -> None:  # fmt: skip
        self.log_table(key, columns, data, dataframe, step)

    def _log_media(self, kind: str, key: str, items: list[Any], step: int | None, **kwargs: Any) -> None:
        wandb = _package("wandb")
        if not isinstance(items, list):
            raise TypeError(f"WandbLogger.log_{kind.lower()}({key!r}, ...): expected a list, got {type(items).__name__}.")
        for name, values in kwargs.items():
            if len(values) != len(items):
                raise ValueError(f"Expected {len(items)} items but only found {len(values)} for {name}")
        each = [{name: values[i] for name, values in kwargs.items()} for i in range(len(items))]
        cls = getattr(wandb, kind)
        self.log_metrics({key: [cls(item, **extra) for item, extra in zip(items, each)]}, step)

    @rank_zero_only
    def log_image(self, key: str, images: list[Any], step: int | None = None, **kwargs: Any) -> None:
        self._log_media("Image", key, images, step, **kwargs)

    @rank_zero_only
    def log_audio(self, key: str, audios: list[Any], step: int | None = None, **kwargs: Any) -> None:
        self._log_media("Audio", key, audios, step, **kwargs)

    @rank_zero_only
    def log_video(self, key: str, videos: list[Any], step: int | None = None, **kwargs: Any) -> None:
        self._log_media("Video", key, videos, step, **kwargs)

    @staticmethod
    def download_artifact(artifact: str, save_dir: str | None = None, artifact_type: str | None = None,
                          use_artifact: bool = True) -> str:  # fmt: skip
        wandb = _package("wandb")
        if wandb.run is not None and use_artifact:
            found = wandb.run.use_artifact(artifact)
        else:
            found = wandb.Api().artifact(artifact, type=artifact_type)
        return str(found.download(root=save_dir))

    def use_artifact(self, artifact: str, artifact_type: str | None = None) -> Any:
        return self.experiment.use_artifact(artifact, type=artifact_type)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if status != "success":
            return  # checkpoints of a failed run are not published as models
        if self._checkpoint_callback is not None and self._experiment is not None:
            self._log_checkpoints(self._checkpoint_callback)

    @rank_zero_only
    def _log_checkpoints(self, checkpoint_callback: Any) -> None:
        wandb = _package("wandb")
        for mtime, path, score, aliases in scan_checkpoints(checkpoint_callback, self._logged_model_time):
            metadata = checkpoint_metadata(checkpoint_callback, path, score)
            metadata["ModelCheckpoint"] = metadata.pop("Checkpoint")  # W&B's artifacts use this key
            artifact = wandb.Artifact(name=self._checkpoint_name or f"model-{self.experiment.id}", type="model",
                                      metadata=metadata)  # fmt: skip
            artifact.add_file(path, name="model.ckpt", policy=self._add_file_policy)
            self.experiment.log_artifact(artifact, aliases=aliases)
            self._logged_model_time[path] = mtime


def _plain(params: dict[str, Any]) -> dict[str, Any]:
    """Config values W&B can store: a callable becomes its name (Lightning calls it when it takes no
    arguments; fulmen never calls user code to log it)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            value = _plain(value)
        elif callable(value) and not isinstance(value, type):
            value = getattr(value, "__name__", repr(value))
        elif isinstance(value, type):
            value = value.__name__
        out[key] = value
    return out


# `wandb`, the client package: imported on first use, read from here each time the logger needs it (a patched
# `fulmen.loggers.wandb.wandb` is the one used)
_packages, _package = _optional_packages(__name__, {"wandb": "wandb"})

# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "ModelCheckpoint": "fulmen.callbacks.model_checkpoint.ModelCheckpoint",
}, fallback=_packages)  # fmt: skip

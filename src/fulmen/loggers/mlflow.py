"""``MLFlowLogger``: runs, parameters, metrics and checkpoints in an MLflow tracking store (``pip install
'fulmen[mlflow]'``; ``mlflow`` is imported when the logger is first used)."""

from __future__ import annotations

import os
import re
import tempfile
import time
from argparse import Namespace
from typing import Any, Literal

from fulmen.loggers.logger import (
    CheckpointUploads,
    Logger,
    checkpoint_metadata,
    flatten_params,
    rank_zero_experiment,
    scan_checkpoints,
)
from fulmen.utilities.imports import RequirementCache, require
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.imports import optional_packages as _optional_packages
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn

# whether the logger's package is installed, where programs and test suites written for Lightning look
# (evaluated when read, so importing this module imports no package)
_MLFLOW_AVAILABLE = RequirementCache("mlflow>=1.0.0", "mlflow")
_MLFLOW_SYNCHRONOUS_AVAILABLE = RequirementCache("mlflow>=2.8.0", "mlflow")

_FILE_PREFIX = "file:"
_STATUS = {"success": "FINISHED", "finished": "FINISHED", "failed": "FAILED"}
_BAD_METRIC_CHARS = re.compile(r"[^a-zA-Z0-9_/. -]+")


class MLFlowLogger(CheckpointUploads, Logger):
    """Log to MLflow: one run in experiment ``experiment_name`` (created if missing), named ``run_name`` and
    tagged with ``tags``; hyperparameters as params (nested keys joined with "/"), metrics with their step.

    The store is ``tracking_uri`` (default: the ``MLFLOW_TRACKING_URI`` variable, else ``file:<save_dir>``;
    recent MLflow refuses the ``file:`` store unless ``MLFLOW_ALLOW_FILE_STORE=true``, so prefer
    ``tracking_uri="sqlite:///mlflow.db"``). ``log_model``: ``True`` uploads the checkpoints as artifacts
    when training ends (as they are saved when ``save_top_k=-1``), ``"all"`` as each is saved; each goes to
    ``<name>/<name>.ckpt`` with ``metadata.yaml`` and ``aliases.txt`` beside it. ``run_id`` continues an
    existing run."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        experiment_name: str = "lightning_logs",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: dict[str, Any] | None = None,
        save_dir: str | None = "./mlruns",
        log_model: Literal[True, False, "all"] = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
    ) -> None:
        require("mlflow", "mlflow", "MLFlowLogger", available=_MLFLOW_AVAILABLE)
        if synchronous is not None and not _MLFLOW_SYNCHRONOUS_AVAILABLE:
            raise ModuleNotFoundError(
                f"MLFlowLogger(synchronous={synchronous!r}) needs mlflow>=2.8.0 ({_MLFLOW_SYNCHRONOUS_AVAILABLE}): "
                "pip install -U 'mlflow>=2.8.0', or leave `synchronous` unset."
            )
        if log_model not in (True, False, "all"):
            raise ValueError(f"MLFlowLogger(log_model={log_model!r}) must be True, False or 'all'.")
        tracking_uri = tracking_uri or os.getenv("MLFLOW_TRACKING_URI")
        if tracking_uri is None and save_dir is not None:
            tracking_uri = f"{_FILE_PREFIX}{save_dir}"
        self._experiment_name = experiment_name
        self._run_name = run_name
        self._tracking_uri = tracking_uri
        self.tags = tags
        self._log_model = log_model
        self._prefix = prefix
        self._artifact_location = artifact_location
        self._run_id = run_id
        self._synchronous = synchronous
        self._experiment_id: str | None = None
        self._client: Any = None
        self._initialized = False
        self._logged_model_time: dict[str, float] = {}
        self._checkpoint_callback: Any = None

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The ``mlflow.tracking.MlflowClient`` (the run is created or looked up on first use)."""
        if self._client is None:
            self._client = _package("MlflowClient")(self._tracking_uri)
        if self._initialized:
            return self._client
        client = self._client
        if self._run_id is not None:
            self._experiment_id = client.get_run(self._run_id).info.experiment_id
        else:
            experiment = client.get_experiment_by_name(self._experiment_name)
            if experiment is not None:
                self._experiment_id = experiment.experiment_id
            else:
                rank_zero_info(f"Experiment with name {self._experiment_name} not found. Creating it.")
                self._experiment_id = client.create_experiment(
                    name=self._experiment_name, artifact_location=self._artifact_location
                )
            resolve_tags = _get_resolve_tags()
            tags = dict(self.tags or {})
            if self._run_name is not None:
                if "mlflow.runName" in tags:
                    rank_zero_warn(
                        f"MLFlowLogger(run_name={self._run_name!r}) replaces tags['mlflow.runName']="
                        f"{tags['mlflow.runName']!r}."
                    )
                tags["mlflow.runName"] = self._run_name
            run = client.create_run(experiment_id=self._experiment_id, tags=resolve_tags(tags))
            self._run_id = run.info.run_id
        self._initialized = True
        return client

    @property
    def run_id(self) -> str | None:
        _ = self.experiment
        return self._run_id

    @property
    def experiment_id(self) -> str | None:
        _ = self.experiment
        return self._experiment_id

    @property
    def name(self) -> str | None:
        return self.experiment_id

    @property
    def version(self) -> str | None:
        return self.run_id

    @property
    def save_dir(self) -> str | None:
        """The local folder of a ``file:`` store (checkpoints go under it by default), else None."""
        uri = self._tracking_uri
        return uri[len(_FILE_PREFIX):] if uri and uri.startswith(_FILE_PREFIX) else None

    def _batch_kwargs(self) -> dict[str, Any]:
        return {} if self._synchronous is None else {"synchronous": self._synchronous}

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        from mlflow.entities import Param

        flat = flatten_params(vars(params) if isinstance(params, Namespace) else dict(params))
        # MLflow limits a param value's length; keep the start of long ones (e.g. a long list)
        entries = [Param(key=key, value=str(value)[:250]) for key, value in flat.items()]
        for start in range(0, len(entries), 100):  # the store accepts at most 100 params per batch
            self.experiment.log_batch(run_id=self.run_id, params=entries[start : start + 100], **self._batch_kwargs())

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        timestamp = int(time.time() * 1000)
        entries = []
        for key, value in metrics.items():
            name = f"{self._prefix}{self.LOGGER_JOIN_CHAR}{key}" if self._prefix else key
            if isinstance(value, str):
                rank_zero_warn(f"MLFlowLogger: metric {name!r} is a string ({value!r}); MLflow takes numbers only, skipped.")
                continue
            clean = _BAD_METRIC_CHARS.sub("", name)
            if clean != name:
                rank_zero_warn(
                    f"MLflow allows only letters, digits and '_', '/', '.', ' ', '-' in metric names: {name!r} is "
                    f"logged as {clean!r}."
                )
            value = float(value.item() if hasattr(value, "item") else value)
            entries.append(Metric(key=clean, value=value, timestamp=timestamp, step=step or 0))
        if entries:
            self.experiment.log_batch(run_id=self.run_id, metrics=entries, **self._batch_kwargs())

    @rank_zero_only
    def finalize(self, status: str = "success") -> None:
        if not self._initialized:
            return
        if self._checkpoint_callback is not None:
            self._log_checkpoints(self._checkpoint_callback)
        client = self.experiment
        if client.get_run(self.run_id):
            client.set_terminated(self.run_id, _STATUS.get(status, status))

    @rank_zero_only
    def _log_checkpoints(self, checkpoint_callback: Any) -> None:
        import yaml

        for mtime, path, score, aliases in scan_checkpoints(checkpoint_callback, self._logged_model_time):
            stem = os.path.splitext(os.path.basename(path))[0]
            self.experiment.log_artifact(self.run_id, path, stem)
            with tempfile.TemporaryDirectory(prefix="fulmen-mlflow-") as folder:
                with open(os.path.join(folder, "metadata.yaml"), "w") as f:
                    yaml.dump(checkpoint_metadata(checkpoint_callback, path, score), f, default_flow_style=False)
                with open(os.path.join(folder, "aliases.txt"), "w") as f:
                    f.write(str(aliases))
                self.experiment.log_artifacts(self.run_id, folder, stem)
            self._logged_model_time[path] = mtime


def _get_resolve_tags() -> Any:
    """MLflow's ``resolve_tags``: the tags a new run gets (user, source ...) added to the given ones; looked up
    as this module's name when a run is created, so that a test can patch it."""
    from mlflow.tracking.context.registry import resolve_tags

    return resolve_tags


# `MlflowClient`, the client this logger talks through: imported on first use, read from here each time a
# logger makes one (a patched `fulmen.loggers.mlflow.MlflowClient` is the one used)
_packages, _package = _optional_packages(__name__, {"MlflowClient": "mlflow.tracking:MlflowClient"})

# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "ModelCheckpoint": "fulmen.callbacks.model_checkpoint.ModelCheckpoint",
}, fallback=_packages)  # fmt: skip

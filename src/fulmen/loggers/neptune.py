"""``NeptuneLogger`` (Lightning 1.x's): Neptune runs (``pip install 'fulmen[neptune]'``; ``neptune`` is
imported when the logger is first used). ``mode="offline"`` keeps the run under ``.neptune/offline`` for a
later ``neptune sync``."""

from __future__ import annotations

import os
from argparse import Namespace
from typing import Any

from fulmen.loggers.logger import Logger, flatten_params, rank_zero_experiment
from fulmen.utilities.imports import RequirementCache, require
from fulmen.utilities.imports import optional_packages as _optional_packages
from fulmen.utilities.rank_zero import rank_zero_only

# whether the logger's package is installed (the flag Lightning's NeptuneLogger read, before Neptune was retired)
_NEPTUNE_AVAILABLE = RequirementCache("neptune>=1.0")

# `neptune`, the client package: imported on first use, read from here each time the logger starts a run (a
# patched `fulmen.loggers.neptune.neptune` is the one used)
__getattr__, _package = _optional_packages(__name__, {"neptune": "neptune"})


class NeptuneLogger(Logger):
    """Log to a Neptune run: hyperparameters under ``<prefix>/hyperparams``, each metric as a series
    ``<prefix>/<name>`` with the trainer's step, the final status under ``<prefix>/status``; with
    ``log_model_checkpoints`` the saved checkpoints are uploaded under ``<prefix>/model/checkpoints/<name>``
    and the best one's path and score recorded. ``run`` continues an existing ``neptune.Run``; other keyword
    arguments go to ``neptune.init_run`` (``mode``, ``tags``, ...)."""

    LOGGER_JOIN_CHAR = "/"

    def __init__(
        self,
        *args: Any,
        api_key: str | None = None,
        project: str | None = None,
        name: str | None = None,
        run: Any = None,
        log_model_checkpoints: bool | None = True,
        prefix: str = "training",
        **neptune_run_kwargs: Any,
    ) -> None:
        if args:  # `*args` only mirrors Lightning's signature: every setting is named
            raise TypeError(
                f"NeptuneLogger takes keyword arguments only, got {len(args)} positional: {args!r}. Name them, e.g. "
                "NeptuneLogger(project='workspace/project', api_key=...)."
            )
        require("neptune", "neptune", "NeptuneLogger", available=_NEPTUNE_AVAILABLE)
        self._api_key = api_key
        self._project = project
        self._name = name
        self._run = run
        self._log_model_checkpoints = log_model_checkpoints
        self._prefix = prefix
        self._kwargs = neptune_run_kwargs
        self._uploaded: set[str] = set()

    def _path(self, key: str) -> str:
        return f"{self._prefix}{self.LOGGER_JOIN_CHAR}{key}" if self._prefix else key

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The ``neptune.Run`` (started on first use)."""
        return self.run

    @property
    def run(self) -> Any:
        if self._run is None:
            neptune = _package("neptune")
            self._run = neptune.init_run(project=self._project, api_token=self._api_key, name=self._name,
                                         **self._kwargs)  # fmt: skip
        return self._run

    @property
    def name(self) -> str | None:
        return self._project or "offline-name"

    @property
    def version(self) -> str | None:
        run = self._run
        if run is None:
            return None
        return str(getattr(run, "_id", None) or run["sys/id"].fetch())

    @property
    def save_dir(self) -> str:
        return os.path.join(os.getcwd(), ".neptune")

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        from neptune.utils import stringify_unsupported

        params = vars(params) if isinstance(params, Namespace) else dict(params)
        self.run[self._path("hyperparams")] = stringify_unsupported(flatten_params(params))

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        for key, value in metrics.items():
            value = value.item() if hasattr(value, "item") else value
            self.run[self._path(key)].append(value, step=step)

    @rank_zero_only
    def log_model_summary(self, model: Any, max_depth: int = -1) -> None:
        from fulmen.utilities.model_summary import summarize

        self.run[self._path("model/summary")] = str(summarize(model, max_depth=max_depth))

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        if not self._log_model_checkpoints:
            return
        self._upload_checkpoints(checkpoint_callback)

    @rank_zero_only
    def _upload_checkpoints(self, checkpoint_callback: Any) -> None:
        paths = set(getattr(checkpoint_callback, "best_k_models", {}) or {})
        for attribute in ("last_model_path", "best_model_path"):
            if getattr(checkpoint_callback, attribute, ""):
                paths.add(getattr(checkpoint_callback, attribute))
        for path in sorted(paths - self._uploaded):
            if os.path.isfile(path):
                name = os.path.splitext(os.path.basename(path))[0]
                self.run[self._path(f"model/checkpoints/{name}")].upload(path)
                self._uploaded.add(path)
        best = getattr(checkpoint_callback, "best_model_path", "")
        if best:
            self.run[self._path("model/best_model_path")] = best
        score = getattr(checkpoint_callback, "best_model_score", None)
        if score is not None:
            self.run[self._path("model/best_model_score")] = float(score)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._run is None:
            return
        if status:
            self.run[self._path("status")] = status
        self.run.wait()  # everything logged is written (offline) or sent before fit returns

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_run"] = None
        return state

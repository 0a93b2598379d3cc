"""``CometLogger``: Comet experiments (``pip install 'fulmen[comet]'``; ``comet_ml`` is imported when the
logger is first used). ``online=False`` writes an offline archive (``comet upload`` sends it later)."""

from __future__ import annotations

from argparse import Namespace
from typing import Any

from fulmen.loggers.logger import Logger, rank_zero_experiment
from fulmen.utilities.imports import RequirementCache, require
from fulmen.utilities.imports import optional_packages as _optional_packages
from fulmen.utilities.rank_zero import rank_zero_only

# whether the logger's package is installed, where programs and test suites written for Lightning look
# (evaluated when read, so importing this module imports no package)
_COMET_AVAILABLE = RequirementCache("comet-ml>=3.44.4", module="comet_ml")

# `comet_ml`, the client package: imported on first use, read from here each time the logger needs it (a
# patched `fulmen.loggers.comet.comet_ml` is the one used)
__getattr__, _package = _optional_packages(__name__, {"comet_ml": "comet_ml"})


class CometLogger(Logger):
    """Log to a Comet experiment, started with ``comet_ml.start``: ``api_key``, ``workspace``, ``project``,
    ``experiment_key`` (continue an experiment), ``mode`` ("get_or_create", "get", "create") and ``online``
    as Comet takes them; other keyword arguments go to ``comet_ml.ExperimentConfig`` (``offline_directory``,
    ``name``, ``tags`` ...). Metrics carry the trainer's step and epoch; nested hyperparameters are flattened
    by Comet ("|"). ``finalize`` ends the experiment, which writes the archive of an offline one."""

    def __init__(
        self,
        *,
        api_key: str | None = None,
        workspace: str | None = None,
        project: str | None = None,
        experiment_key: str | None = None,
        mode: str | None = None,
        online: bool | None = None,
        prefix: str | None = None,
        **kwargs: Any,
    ) -> None:
        require("comet_ml", "comet", "CometLogger", available=_COMET_AVAILABLE)
        self._api_key = api_key
        self._workspace = workspace
        self._project = project
        self._experiment_key = experiment_key
        self._mode = mode
        self._online = online
        self._prefix = prefix
        self._config = kwargs
        self._experiment: Any = None

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The ``comet_ml`` experiment (started on first use)."""
        if self._experiment is None:
            comet_ml = _package("comet_ml")
            self._experiment = comet_ml.start(
                api_key=self._api_key, workspace=self._workspace, project=self._project,
                experiment_key=self._experiment_key, mode=self._mode, online=self._online,
                experiment_config=comet_ml.ExperimentConfig(**self._config),
            )  # fmt: skip
            self._experiment_key = self._experiment.get_key()
        return self._experiment

    @property
    def name(self) -> str | None:
        return self._project

    @property
    def version(self) -> str | None:
        return self._experiment_key

    @property
    def save_dir(self) -> str | None:
        """The folder of an offline experiment's archive, else None."""
        return self._config.get("offline_directory") if self._online is False else None

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        self.experiment.log_parameters(vars(params) if isinstance(params, Namespace) else dict(params))

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
        metrics = {k: (v.item() if hasattr(v, "item") else v) for k, v in metrics.items()}
        epoch = metrics.pop("epoch", None)
        self.experiment.log_metrics(metrics, step=step, epoch=epoch, prefix=self._prefix)

    @rank_zero_only
    def log_graph(self, model: Any, input_array: Any = None) -> None:
        self.experiment.set_model_graph(model)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._experiment is None:
            return
        self._experiment.end()  # an offline experiment writes its archive here
        self._experiment = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_experiment"] = None
        return state

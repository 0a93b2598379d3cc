"""``LitLogger``: Lightning's logger for the Lightning AI experiments platform (lightning.ai).

It needs the ``litlogger`` package and a lightning.ai account, neither of which fulmen supports: the logger
constructs with Lightning's arguments and answers where its files would go (``name``, ``root_dir``,
``log_dir``, ...), so that a program building it runs until it logs; logging anything then raises an error
naming what is missing and the loggers to use instead.
"""

from __future__ import annotations

import datetime
import os
import warnings
from argparse import Namespace
from collections.abc import Mapping
from typing import Any, NoReturn

from fulmen.loggers.logger import Logger
from fulmen.loggers.logger import rank_zero_experiment as rank_zero_experiment
from fulmen.utilities.cloud_io import get_filesystem as get_filesystem
from fulmen.utilities.imports import RequirementCache
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_only

# whether the logger's package is installed, where programs and test suites written for Lightning look
# (evaluated when read, so importing this module imports no package)
_LITLOGGER_AVAILABLE = RequirementCache("litlogger>=0.1.0")

_INSTEAD = "CSVLogger, TensorBoardLogger, MLFlowLogger or WandbLogger (offline mode included)"


def _unavailable(what: str) -> NoReturn:
    if not _LITLOGGER_AVAILABLE:  # read now: a program or test may patch it
        raise ModuleNotFoundError(
            f"LitLogger.{what} needs the `litlogger` package (pip install litlogger) and a lightning.ai account; "
            f"it is not installed. Log with {_INSTEAD} instead."
        )
    raise NotImplementedError(
        f"LitLogger.{what}: fulmen does not talk to the Lightning AI platform, even with `litlogger` installed. "
        f"Log with {_INSTEAD} instead."
    )


class LitLogger(Logger):
    """Logs to a lightning.ai experiment named ``name`` (generated when not given), keeping local files under
    ``root_dir/name``. Unsupported in fulmen: see the module's note."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        root_dir: str | os.PathLike[str] | None = None,
        name: str | None = None,
        teamspace: str | None = None,
        metadata: dict[str, str] | None = None,
        store_step: bool = True,
        log_model: bool = False,
        save_logs: bool = True,
        checkpoint_name: str | None = None,
    ) -> None:
        super().__init__()
        self._root_dir = os.fspath(root_dir or "./lightning_logs")
        # litlogger's generator names the experiment on the platform; here a time stamp makes a folder name
        self._name = name or datetime.datetime.now().strftime("experiment-%Y-%m-%d-%H-%M-%S")
        self._version: str | None = None
        self._sub_dir: str | None = None
        self._teamspace = teamspace
        self._metadata = dict(metadata or {})
        self._store_step = store_step
        self._log_model = log_model
        self._save_logs = save_logs
        self._checkpoint_name = checkpoint_name

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str | None:
        return self._version

    @property
    def root_dir(self) -> str:
        return self._root_dir

    @property
    def log_dir(self) -> str:
        """``root_dir/name`` (``~`` and environment variables expanded)."""
        log_dir = os.path.join(self.root_dir, self.name)
        if isinstance(self.sub_dir, str):
            log_dir = os.path.join(log_dir, self.sub_dir)
        return os.path.expanduser(os.path.expandvars(log_dir))

    @property
    def save_dir(self) -> str:
        return self.log_dir

    @property
    def sub_dir(self) -> str | None:
        return self._sub_dir

    @property
    def experiment(self) -> Any:
        _unavailable("experiment")

    @property
    def url(self) -> str:
        _unavailable("url")

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        _unavailable("log_metrics")

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, metrics: dict[str, Any] | None = None) -> None:
        _unavailable("log_hyperparams")

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        warnings.warn("LitLogger does not support `log_graph`", UserWarning, stacklevel=2)

    def save(self) -> None:
        pass

    def finalize(self, status: str | None = None) -> None:
        pass  # nothing was started, so nothing is left to close

    def log_metadata(self, params: dict[str, Any] | Namespace) -> None:
        _unavailable("log_metadata")

    def log_model(
        self,
        model: Any,
        staging_dir: str | None = None,
        verbose: bool = False,
        version: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        _unavailable("log_model")

    def log_model_artifact(self, path: str, verbose: bool = False, version: str | None = None) -> None:
        _unavailable("log_model_artifact")

    def get_file(self, path: str, verbose: bool = True) -> str:
        _unavailable("get_file")

    def log_file(self, path: str) -> None:
        _unavailable("log_file")

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        if self._log_model:
            _unavailable("after_save_checkpoint (log_model=True uploads checkpoints)")


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "ModelCheckpoint": "fulmen.callbacks.model_checkpoint.ModelCheckpoint",
})  # fmt: skip

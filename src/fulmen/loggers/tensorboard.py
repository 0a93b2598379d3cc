"""``TensorBoardLogger``: real TensorBoard event files (written by ``tensorboard``'s writer, or by
``tensorboardX``'s when only that one is installed).

A remote ``save_dir`` (``s3://``, ``memory://`` ... any fsspec URL): TensorBoard's writer only writes local
files, so events go to a local staging folder and every ``save()`` / ``finalize()`` uploads that folder to the
run's ``log_dir``; what is on the store is at most one flush behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from argparse import Namespace
from typing import Any

import torch

from fulmen.core.module import jit_tracing
from fulmen.core.saving import save_hparams_to_yaml as save_hparams_to_yaml
from fulmen.loggers.logger import (
    Logger,
    flatten_params,
    next_version,
    rank_zero_experiment,
    sanitize_params,
    save_hparams_yaml,
)
from fulmen.utilities import cloud_io
from fulmen.utilities.apply_func import move_data_to_device
from fulmen.utilities.imports import _OMEGACONF_AVAILABLE as _OMEGACONF_AVAILABLE
from fulmen.utilities.imports import _TENSORBOARD_AVAILABLE as _TENSORBOARD_AVAILABLE
from fulmen.utilities.imports import _TENSORBOARDX_AVAILABLE as _TENSORBOARDX_AVAILABLE
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_only, rank_zero_warn


class TensorBoardLogger(Logger):
    """Writes ``save_dir/name/version_N/events.out.tfevents.*`` and ``hparams.yaml``."""

    NAME_HPARAMS_FILE = "hparams.yaml"
    LOGGER_JOIN_CHAR = "-"  # between ``prefix`` and each metric name

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | os.PathLike[str] | None = None,
        **kwargs: Any,
    ) -> None:
        if not _TENSORBOARD_AVAILABLE and not _TENSORBOARDX_AVAILABLE:
            raise ModuleNotFoundError(
                "Neither `tensorboard` nor `tensorboardX` is available. Try `pip install`ing either.\n"
                f"{_TENSORBOARDX_AVAILABLE}\n{_TENSORBOARD_AVAILABLE}"
            )
        self._save_dir = cloud_io.local(save_dir)
        if not cloud_io.is_remote(self._save_dir):  # "$SCRATCH/runs", as Lightning's TensorBoardLogger reads it
            self._save_dir = os.path.expandvars(self._save_dir)
        cloud_io.check_reachable(self._save_dir, "TensorBoardLogger(save_dir)")
        self._staging: str | None = None  # the local folder the writer uses when log_dir is a URL
        self._name = name or ""
        self._version = version
        if log_graph and not _TENSORBOARD_AVAILABLE:  # tensorboardX cannot trace a graph
            rank_zero_warn(
                "You set `TensorBoardLogger(log_graph=True)` but `tensorboard` is not available.\n"
                f"{_TENSORBOARD_AVAILABLE}"
            )
        self._log_graph = log_graph and bool(_TENSORBOARD_AVAILABLE)
        self._default_hp_metric = default_hp_metric
        self._prefix = prefix
        self._sub_dir = os.fspath(sub_dir) if sub_dir is not None else None
        self._kwargs = kwargs
        self._experiment: Any = None
        self.hparams: dict[str, Any] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> int | str:
        if self._version is None:
            self._version = next_version(self.root_dir)
        return self._version

    @property
    def save_dir(self) -> str:
        return self._save_dir

    @property
    def root_dir(self) -> str:
        return cloud_io.join(self._save_dir, self.name)  # the property: a subclass may override it

    @property
    def sub_dir(self) -> str | None:
        """The folder under the version's folder that the events go to (``sub_dir`` as given; ``log_dir``
        expands ``~`` and environment variables in it)."""
        return self._sub_dir

    @property
    def log_dir(self) -> str:
        version = self.version if isinstance(self.version, str) else f"version_{self.version}"
        path = cloud_io.join(self.root_dir, version)
        sub_dir = self.sub_dir
        return cloud_io.join(path, os.path.expandvars(os.path.expanduser(sub_dir))) if sub_dir else path

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        """The ``torch.utils.tensorboard.SummaryWriter`` (created on first use, on global rank zero; other
        ranks get a stand-in that writes nothing)."""
        if self._experiment is None:
            if _TENSORBOARD_AVAILABLE:
                from torch.utils.tensorboard import SummaryWriter
            else:  # tensorboardX writes the same event files
                from tensorboardX import SummaryWriter  # type: ignore[no-redef]

            self._experiment = SummaryWriter(log_dir=self._writer_dir(), **self._kwargs)
        return self._experiment

    def _writer_dir(self) -> str:
        if not cloud_io.is_remote(self.log_dir):
            os.makedirs(self.log_dir, exist_ok=True)
            return self.log_dir
        if self._staging is None:
            self._staging = tempfile.mkdtemp(prefix="fulmen-tensorboard-")
        return self._staging

    def _upload(self) -> None:
        """Copy the staged event files to the remote ``log_dir`` (each one whole)."""
        if self._staging is None:
            return
        for name in sorted(os.listdir(self._staging)):
            local = os.path.join(self._staging, name)
            if os.path.isfile(local):
                cloud_io.copy(local, cloud_io.join(self.log_dir, name))

    @rank_zero_only
    def log_hyperparams(
        self,
        params: dict[str, Any] | Namespace,
        metrics: dict[str, Any] | None = None,
        step: int | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        """Record ``params`` (and ``metrics``, default ``{"hp_metric": -1}`` with ``default_hp_metric``; a
        single value is ``hp_metric``) for TensorBoard's HPARAMS tab, at ``step`` (none: 0)."""
        params = vars(params) if isinstance(params, Namespace) else dict(params)
        self.hparams.update(params)
        flat = sanitize_params(flatten_params(params))
        if metrics is None:
            if self._default_hp_metric:
                metrics = {"hp_metric": -1}
        elif not isinstance(metrics, dict):
            metrics = {"hp_metric": metrics}
        if metrics:
            self.log_metrics(metrics, step)
            if _TENSORBOARD_AVAILABLE:
                from torch.utils.tensorboard.summary import hparams
            else:
                from tensorboardX.summary import hparams  # type: ignore[no-redef]

            exp, ssi, sei = hparams(flat, metrics)
            writer = self.experiment._get_file_writer()
            for summary in (exp, ssi, sei):
                writer.add_summary(summary, step)

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        for key, value in metrics.items():
            tag = f"{self._prefix}{self.LOGGER_JOIN_CHAR}{key}" if self._prefix else key
            if isinstance(value, dict):
                self.experiment.add_scalars(tag, value, step)
            else:
                self.experiment.add_scalar(tag, value, step)

    @rank_zero_only
    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """The model's graph, traced on ``input_array`` or ``model.example_input_array`` (``log_graph=True``)."""
        if not self._log_graph:
            return
        example = input_array if input_array is not None else getattr(model, "example_input_array", None)
        if example is None:
            rank_zero_warn(
                "Could not log computational graph to TensorBoard: The `model.example_input_array` attribute is not "
                "set or `input_array` was not given."
            )
            return
        if not isinstance(example, (torch.Tensor, tuple)):
            rank_zero_warn(
                f"Could not log computational graph to TensorBoard: the input ({type(example).__name__}) can't be "
                "traced by TensorBoard. Make it a tensor, or a tuple of the positional arguments of `forward()`."
            )
            return
        device = getattr(model, "device", None)
        if isinstance(device, torch.device):
            example = move_data_to_device(example, device)
        with jit_tracing():  # tracing reads every attribute: `trainer` of a detached module must not raise
            self.experiment.add_graph(model, example)

    @rank_zero_only
    def save(self) -> None:
        if self._experiment is not None:
            self._experiment.flush()
            self._upload()
        # hparams.yaml beside the events once the run has a directory, empty if nothing was logged (as in
        # Lightning: load_from_checkpoint(hparams_file=...) can always be pointed at it)
        if self.hparams or self._experiment is not None or cloud_io.isdir(self.log_dir):
            cloud_io.makedirs(self.log_dir)
            save_hparams_yaml(cloud_io.join(self.log_dir, self.NAME_HPARAMS_FILE), self.hparams)

    @rank_zero_only
    def finalize(self, status: str) -> None:
        if self._experiment is not None:
            self._experiment.flush()
            self._experiment.close()
            if self._staging is not None:
                # a remote save_dir: the staged files are uploaded now and the staging goes; a later use makes
                # a new writer (and staging). Locally the closed writer stays, as in Lightning: reading
                # `logger.experiment` after the run opens no new event file (logging with it again does)
                self._experiment = None
            self._upload()
        self.save()
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_experiment"] = None
        return state


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "ModelCheckpoint": "fulmen.callbacks.model_checkpoint.ModelCheckpoint",
})  # fmt: skip

class FabricTensorBoardLogger(TensorBoardLogger):
    """Lightning Fabric's ``TensorBoardLogger`` (which Lightning's subclasses): this ``TensorBoardLogger`` made
    with Fabric's arguments, ``root_dir`` for ``save_dir``: the same files (``root_dir/name/version_N``). Unlike
    Lightning's class tree, fulmen's ``TensorBoardLogger`` is not an instance of this one, and ``.root_dir`` reads as
    on Lightning's loggers (``root_dir/name``, the folder of the versions), not as on Fabric's (the folder given)."""

    def __init__(self, root_dir: str | os.PathLike[str], name: str | None = "lightning_logs",
                 version: int | str | None = None, default_hp_metric: bool = True, prefix: str = "",
                 sub_dir: str | os.PathLike[str] | None = None, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(save_dir=root_dir, name=name, version=version, default_hp_metric=default_hp_metric,
                         prefix=prefix, sub_dir=sub_dir, **kwargs)  # fmt: skip

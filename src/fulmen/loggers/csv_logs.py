"""``CSVLogger``: metrics to ``metrics.csv`` and hyper-parameters to ``hparams.yaml``."""

from __future__ import annotations

import csv
import io
import os
from argparse import Namespace
from typing import Any

from fulmen.core.saving import save_hparams_to_yaml as save_hparams_to_yaml
from fulmen.loggers.logger import Logger, next_version, rank_zero_experiment, save_hparams_yaml
from fulmen.utilities import cloud_io
from fulmen.utilities.rank_zero import rank_zero_only


class ExperimentWriter:
    """What ``CSVLogger.experiment`` is: the rows and hyper-parameters of one run directory, written to
    ``metrics.csv`` and ``hparams.yaml`` in ``log_dir``.

    Rows are kept in ``metrics`` until ``save()``, which appends them to the file (the whole file is
    rewritten, atomically, only when a new column appears or the store cannot append). A directory that
    already holds a run's files is added to, never emptied.
    """

    NAME_METRICS_FILE = "metrics.csv"
    NAME_HPARAMS_FILE = "hparams.yaml"

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.metrics_file_path = cloud_io.join(log_dir, self.NAME_METRICS_FILE)
        self.hparams: dict[str, Any] = {}
        self.metrics: list[dict[str, Any]] = []
        self.metrics_keys: list[str] = []
        cloud_io.makedirs(log_dir)

    def log_hparams(self, params: dict[str, Any]) -> None:
        """Add ``params`` and write ``hparams.yaml`` now (a run that ends early still has them)."""
        self.hparams.update(params)
        save_hparams_yaml(cloud_io.join(self.log_dir, self.NAME_HPARAMS_FILE), self.hparams)

    def log_metrics(self, metrics_dict: dict[str, Any], step: int | None = None) -> None:
        row = {k: v.item() if hasattr(v, "item") else v for k, v in metrics_dict.items()}
        row["step"] = step if step is not None else len(self.metrics)
        self.metrics.append(row)

    def save(self) -> None:
        if not self.metrics:
            return
        path = self.metrics_file_path
        # columns in sorted order (``epoch, step, train_loss, val_loss``), re-sorted when a metric appears
        # later: the header is the same as Lightning's for the same run, so scripts reading columns by
        # position, or comparing files, work on both
        columns = sorted({*self.metrics_keys, *(k for row in self.metrics for k in row)})
        if cloud_io.is_remote(path) or (set(columns) != set(self.metrics_keys) and os.path.exists(path)):
            # a new metric appeared (or the store cannot append): rewrite the file whole, atomically
            old = []
            if cloud_io.exists(path):
                old = list(csv.DictReader(io.StringIO(cloud_io.read_bytes(path).decode("utf-8"))))
                columns = sorted({*(old[0].keys() if old else []), *columns})
            out = io.StringIO()
            writer = csv.DictWriter(out, fieldnames=columns)
            writer.writeheader()
            writer.writerows(old)
            writer.writerows(self.metrics)
            cloud_io.write_text(path, out.getvalue())
        else:
            new_file = not os.path.exists(path)
            if not new_file and not self.metrics_keys:  # a file of an earlier run in this directory: its columns
                with open(path, newline="", encoding="utf-8") as f:
                    header = next(csv.reader(f), [])
                if set(columns) <= set(header):
                    columns = header
                else:  # new columns: rewrite with the union
                    self.metrics_keys = header
                    self.save()
                    return
            with open(path, "a", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=columns)
                if new_file:
                    writer.writeheader()
                writer.writerows(self.metrics)
        self.metrics_keys = columns
        self.metrics = []


class CSVLogger(Logger):
    """Writes ``save_dir/name/version_N/metrics.csv`` (one row per logged step) and ``hparams.yaml``."""

    LOGGER_JOIN_CHAR = "-"

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str | None = "lightning_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        self._save_dir = cloud_io.local(save_dir)
        cloud_io.check_reachable(self._save_dir, "CSVLogger(save_dir)")
        self._name = name or ""
        self._version = version
        self._prefix = prefix
        self._flush_logs_every_n_steps = flush_logs_every_n_steps
        self._experiment: ExperimentWriter | None = None

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
        return cloud_io.join(self._save_dir, self._name) if self._name else self._save_dir

    @property
    def log_dir(self) -> str:
        version = self.version if isinstance(self.version, str) else f"version_{self.version}"
        return cloud_io.join(self.root_dir, version)

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        """The run's :class:`ExperimentWriter` (its directory is made on first use)."""
        if self._experiment is None:
            self._experiment = ExperimentWriter(self.log_dir)
        return self._experiment

    @rank_zero_only
    def log_hyperparams(
        self, params: dict[str, Any] | Namespace | None = None, *args: Any, **kwargs: Any
    ) -> None:
        params = {} if params is None else vars(params) if isinstance(params, Namespace) else dict(params)
        self.experiment.log_hparams(params)

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        row = {f"{self._prefix}{self.LOGGER_JOIN_CHAR}{k}" if self._prefix else k: v for k, v in metrics.items()}
        if step is None:
            step = len(self.experiment.metrics)
        self.experiment.log_metrics(row, step)
        if (step + 1) % self._flush_logs_every_n_steps == 0:
            self.save()

    @rank_zero_only
    def save(self) -> None:
        super().save()
        self.experiment.save()

class FabricCSVLogger(CSVLogger):
    """Lightning Fabric's ``CSVLogger`` (which Lightning's subclasses): this ``CSVLogger`` made with Fabric's
    arguments, ``root_dir`` for ``save_dir``: the same files (``root_dir/name/version_N``). Unlike Lightning's class
    tree, fulmen's ``CSVLogger`` is not an instance of this one, and ``.root_dir`` reads as on Lightning's loggers
    (``root_dir/name``, the folder of the versions), not as on Fabric's (the folder given)."""

    def __init__(self, root_dir: str | os.PathLike[str], name: str | None = "lightning_logs",
                 version: int | str | None = None, prefix: str = "", flush_logs_every_n_steps: int = 100) -> None:  # fmt: skip
        super().__init__(save_dir=root_dir, name=name, version=version, prefix=prefix,
                         flush_logs_every_n_steps=flush_logs_every_n_steps)  # fmt: skip

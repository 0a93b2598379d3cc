"""``CSVLogger``: metrics to ``metrics.csv`` and hyper-parameters to ``hparams.yaml``."""

from __future__ import annotations

import csv
import io
import os
from argparse import Namespace
from typing import Any

from fulmen.loggers.logger import Logger, next_version, save_hparams_yaml
from fulmen.utilities import cloud_io
from fulmen.utilities.rank_zero import rank_zero_only


class CSVLogger(Logger):
    """Writes ``save_dir/name/version_N/metrics.csv`` (one row per logged step) and ``hparams.yaml``."""

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
        self._flush_every = flush_logs_every_n_steps
        self._rows: list[dict[str, Any]] = []
        self._columns: list[str] = []
        self._hparams: dict[str, Any] = {}
        self._written_rows = 0

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
        return cloud_io.join(self._save_dir, self._name)

    @property
    def log_dir(self) -> str:
        version = self.version if isinstance(self.version, str) else f"version_{self.version}"
        return cloud_io.join(self.root_dir, version)

    @property
    def experiment(self) -> CSVLogger:
        return self

    @rank_zero_only
    def log_hyperparams(
        self, params: dict[str, Any] | Namespace | None = None, *args: Any, **kwargs: Any
    ) -> None:
        if params is None:
            return
        self._hparams.update(vars(params) if isinstance(params, Namespace) else dict(params))

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        row = {f"{self._prefix}-{k}" if self._prefix else k: v for k, v in metrics.items()}
        row["step"] = step if step is not None else len(self._rows)
        self._rows.append(row)
        if (row["step"] + 1) % self._flush_every == 0:
            self.save()

    @rank_zero_only
    def save(self) -> None:
        cloud_io.makedirs(self.log_dir)
        if self._hparams:
            save_hparams_yaml(cloud_io.join(self.log_dir, "hparams.yaml"), self._hparams)
        if not self._rows:
            return
        path = cloud_io.join(self.log_dir, "metrics.csv")
        new_columns = [k for row in self._rows for k in row if k not in self._columns]
        columns = list(dict.fromkeys(self._columns + new_columns))
        if cloud_io.is_remote(path) or (set(columns) != set(self._columns) and os.path.exists(path)):
            # a new metric appeared (or the store cannot append): rewrite the file whole, atomically
            old = []
            if cloud_io.exists(path):
                old = list(csv.DictReader(io.StringIO(cloud_io.read_bytes(path).decode("utf-8"))))
            out = io.StringIO()
            writer = csv.DictWriter(out, fieldnames=columns)
            writer.writeheader()
            writer.writerows(old)
            writer.writerows(self._rows)
            cloud_io.write_text(path, out.getvalue())
        else:
            new_file = not os.path.exists(path)
            with open(path, "a", newline="", encoding="utf-8") as f:
                writer = csv.DictWriter(f, fieldnames=columns)
                if new_file:
                    writer.writeheader()
                writer.writerows(self._rows)
        self._columns = columns
        self._rows = []

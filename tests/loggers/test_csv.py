"""``CSVLogger`` and its ``ExperimentWriter``: rows kept until saved, appended to an existing run's file."""

from __future__ import annotations

import csv

import torch

from fulmen.core.saving import load_hparams_from_yaml
from fulmen.loggers import CSVLogger
from fulmen.loggers.csv_logs import ExperimentWriter


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_rows_wait_for_save_and_a_second_logger_appends(tmp_path):
    logger = CSVLogger(tmp_path, name="run", version=0, flush_logs_every_n_steps=2)
    assert isinstance(logger.experiment, ExperimentWriter)
    logger.log_metrics({"a": 1.0, "b": torch.tensor(2.0)})  # step 0: kept
    assert logger.experiment.metrics and not (tmp_path / "run" / "version_0" / "metrics.csv").exists()
    logger.log_metrics({"a": 3.0, "b": 4.0})  # step 1: flushed
    assert not logger.experiment.metrics
    assert logger.experiment.metrics_file_path == str(tmp_path / "run" / "version_0" / ExperimentWriter.NAME_METRICS_FILE)
    again = CSVLogger(tmp_path, name="run", version=0, flush_logs_every_n_steps=1)
    again.log_metrics({"a": 5.0, "b": 6.0})  # an earlier run's rows stay (nothing a user wrote is lost)
    assert [r["a"] for r in _rows(again.experiment.metrics_file_path)] == ["1.0", "3.0", "5.0"]
    again.log_metrics({"c": 7.0}, step=10)  # a new column: the file is rewritten with all of them
    rows = _rows(again.experiment.metrics_file_path)
    assert set(rows[0]) == {"a", "b", "c", "step"} and rows[-1]["c"] == "7.0" and rows[0]["c"] == ""


def test_hyperparameters_are_written_at_once(tmp_path):
    logger = CSVLogger(tmp_path, name="", version="2020-02-05")
    logger.log_hyperparams({"lr": 0.1, "layer": torch.nn.BatchNorm1d, "nested": {"a": [1, 2]}})
    saved = load_hparams_from_yaml(tmp_path / "2020-02-05" / ExperimentWriter.NAME_HPARAMS_FILE)
    assert saved["lr"] == 0.1 and saved["nested"] == {"a": [1, 2]} and "layer" in saved

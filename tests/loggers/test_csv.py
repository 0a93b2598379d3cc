"""``CSVLogger`` and its ``ExperimentWriter``: rows kept until saved, appended to an existing run's file."""

from __future__ import annotations

import csv

import torch

from fulmen.core.saving import load_hparams_from_yaml
from fulmen.loggers import CSVLogger
from fulmen.loggers.csv_logs import ExperimentWriter
from tests.parity import oracle


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


def test_columns_are_sorted_and_resorted_when_a_metric_appears(tmp_path):
    logger = CSVLogger(tmp_path, name="run", version=0, flush_logs_every_n_steps=1)
    logger.log_metrics({"train_loss": 1.0, "epoch": 0}, step=0)
    path = logger.experiment.metrics_file_path
    with open(path) as f:
        assert f.readline().strip() == "epoch,step,train_loss"
    logger.log_metrics({"val_acc": 0.5, "a_late": 2.0, "epoch": 0}, step=1)  # new keys: the file is rewritten
    with open(path) as f:
        assert f.readline().strip() == "a_late,epoch,step,train_loss,val_acc"
    rows = _rows(path)
    assert rows[0]["train_loss"] == "1.0" and rows[0]["val_acc"] == "" and rows[1]["a_late"] == "2.0"


def _csv_header_of_a_fit(pl, root):
    """A fit whose metrics appear at different steps: train metrics every 2 steps, validation ones at each
    epoch's end, one train metric only from the second epoch on, an epoch-level one only at the last."""
    from torch.utils.data import DataLoader, TensorDataset

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("train_loss", loss)
            if self.current_epoch >= 1:
                self.log("Zeta_late", loss * 2)
            if self.current_epoch == 2:
                self.log("b_epoch_mean", loss, on_step=False, on_epoch=True)
            return loss

        def validation_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            self.log("val_loss", loss)
            self.log("acc", 1 - loss, prog_bar=True)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    data = TensorDataset(torch.randn(24, 3))
    logger = pl.loggers.CSVLogger(root, name="csv", flush_logs_every_n_steps=3)
    trainer = pl.Trainer(max_epochs=3, log_every_n_steps=2, logger=logger, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, default_root_dir=root)  # fmt: skip
    trainer.fit(Model(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=8))
    with open(logger.experiment.metrics_file_path) as f:
        return f.readline().strip(), len(f.readlines())


@oracle.parity
def test_metrics_csv_header_is_lightnings(tmp_path):
    import fulmen

    lightning = oracle.lightning()
    theirs = _csv_header_of_a_fit(lightning, tmp_path / "lightning")
    ours = _csv_header_of_a_fit(fulmen, tmp_path / "fulmen")
    assert ours == theirs

"""CometLogger in Comet's offline mode: the archive Comet writes (experiment.json and messages.json in a zip)
holds the project, the hyperparameters and the metrics with the trainer's steps and epochs."""

from __future__ import annotations

import json
import zipfile

import pytest

pytest.importorskip("comet_ml", reason="the test extras install comet_ml")

import fulmen
from fulmen.loggers import CometLogger
from tests.loggers.models import model_class


def _read_archive(folder):
    (archive,) = folder.glob("*.zip")
    with zipfile.ZipFile(archive) as zf:
        experiment = json.loads(zf.read("experiment.json"))
        messages = [json.loads(line) for line in zf.read("messages.json").decode().splitlines() if line.strip()]
    params = {m["payload"]["param"]["paramName"]: m["payload"]["param"]["paramValue"]
              for m in messages if m["type"] == "parameter_msg" and m["payload"]["param"]["source"] == "manual"}  # fmt: skip
    metrics: dict[str, list[tuple[int, int, float]]] = {}
    for m in messages:
        if m["type"] == "metric_msg" and not m["payload"]["metric"]["metricName"].startswith("sys."):
            metric = m["payload"]["metric"]
            metrics.setdefault(metric["metricName"], []).append((metric["step"], metric["epoch"], metric["metricValue"]))
    return experiment, params, metrics


@pytest.mark.slow
def test_offline_archive_holds_params_and_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("COMET_DISABLE_AUTO_LOGGING", "1")
    logger = CometLogger(project="proj", online=False, offline_directory=str(tmp_path / "comet"))
    trainer = fulmen.Trainer(max_epochs=2, log_every_n_steps=1, logger=logger, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model_class(fulmen)(nested={"a": 1, "b": {"c": 2}}))
    experiment, params, metrics = _read_archive(tmp_path / "comet")
    assert experiment["project_name"] == "proj" and experiment["offline_id"] == logger.version
    assert params["lr"] == 0.1 and params["nested|a"] == 1 and params["nested|b|c"] == 2
    assert [(step, epoch) for step, epoch, _ in metrics["train_loss"]] == [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1), (5, 1)]
    assert [value for _, _, value in metrics["val_loss"]] == [1.0, pytest.approx(0.9)]
    assert trainer.checkpoint_callback.dirpath == str(tmp_path / "comet" / "proj" / logger.version / "checkpoints")

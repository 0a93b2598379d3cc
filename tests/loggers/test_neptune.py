"""NeptuneLogger in Neptune's offline mode: the operations log Neptune writes (``.neptune/offline/run__*/
data-1.log``) holds the hyperparameters, the metric series with steps, the uploaded checkpoints and the
status."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("neptune", reason="the test extras install neptune")

import fulmen
from fulmen.loggers import NeptuneLogger
from tests.loggers.models import model_class


@pytest.mark.slow
def test_offline_run_holds_params_metrics_and_checkpoints(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NEPTUNE_PROJECT", raising=False)
    logger = NeptuneLogger(project="ws/proj", mode="offline", name="r1")
    trainer = fulmen.Trainer(max_epochs=2, log_every_n_steps=1, logger=logger, enable_progress_bar=False,
                             enable_model_summary=False)  # fmt: skip
    trainer.fit(model_class(fulmen)(nested={"a": 1, "b": {"c": 2}}))
    (log,) = tmp_path.glob(".neptune/offline/run__*/data-1.log")
    operations = [json.loads(line)["obj"] for line in log.read_text().splitlines() if line.strip()]
    assigned = {"/".join(op["path"]): op.get("value") for op in operations if op["type"].startswith("Assign")}
    assert assigned["sys/name"] == "r1" and assigned["training/status"] == "success"
    assert assigned["training/hyperparams/lr"] == 0.1 and assigned["training/hyperparams/nested/b/c"] == 2
    series = [op for op in operations if op["type"] == "LogFloats" and op["path"] == ["training", "train_loss"]]
    assert [value["step"] for op in series for value in op["values"]] == [0, 1, 2, 3, 4, 5]
    uploads = {"/".join(op["path"]) for op in operations if op["type"] == "UploadFile"}
    assert uploads == {"training/model/checkpoints/epoch=0-step=3", "training/model/checkpoints/epoch=1-step=6"}
    assert trainer.checkpoint_callback.dirpath.endswith(f".neptune/ws/proj/{logger.version}/checkpoints")

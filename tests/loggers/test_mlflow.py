"""MLFlowLogger against a real MLflow store (SQLite, and the file store), read back with MLflow's own client:
the same run, params, metric histories, tags and checkpoint artifacts as Lightning's MLFlowLogger writes."""

from __future__ import annotations

import pytest
import yaml

pytest.importorskip("mlflow", reason="the test extras install mlflow-skinny")

import fulmen
from fulmen.loggers import MLFlowLogger
from tests.loggers.models import model_class
from tests.parity import oracle


def _model_class(pl):
    return model_class(pl, odd_metric_name=True)


def _run(pl, logger_cls, uri, tmp_path, log_model, save_top_k=1):
    logger = logger_cls(experiment_name="exp", run_name="r1", tags={"team": "x"}, tracking_uri=uri, log_model=log_model)
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", monitor="val_loss", save_top_k=save_top_k)
    trainer = pl.Trainer(max_epochs=2, log_every_n_steps=1, logger=logger, callbacks=[checkpoint],
                         enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(_model_class(pl)(nested={"a": 1, "b": {"c": 2}}))
    return _read(uri, logger.run_id)


def _read(uri, run_id):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    run = client.get_run(run_id)
    histories = {key: [(m.step, round(m.value, 5)) for m in client.get_metric_history(run_id, key)]
                 for key in run.data.metrics}  # fmt: skip
    artifacts = {}

    def walk(path=None):
        for item in client.list_artifacts(run_id, path):
            if item.is_dir:
                walk(item.path)
            elif item.path.endswith((".yaml", ".txt")):
                local = client.download_artifacts(run_id, item.path)
                with open(local) as f:
                    artifacts[item.path] = yaml.safe_load(f) if item.path.endswith(".yaml") else f.read()
            else:
                artifacts[item.path] = "checkpoint"

    walk()
    tags = {k: v for k, v in run.data.tags.items() if k in ("team", "mlflow.runName")}
    experiment = client.get_experiment(run.info.experiment_id).name
    return {"experiment": experiment, "status": run.info.status, "tags": tags, "params": run.data.params,
            "metrics": histories, "artifacts": artifacts}  # fmt: skip


@oracle.parity
@pytest.mark.slow
@pytest.mark.parametrize("log_model", [False, True, "all"])
def test_same_run_as_lightnings_mlflow_logger(tmp_path, log_model):
    pl = oracle.lightning()
    ours = _run(fulmen, MLFlowLogger, f"sqlite:///{tmp_path}/ours.db", tmp_path / "f", log_model)
    theirs = _run(pl, pl.loggers.MLFlowLogger, f"sqlite:///{tmp_path}/theirs.db", tmp_path / "l", log_model)
    assert ours == theirs
    assert ours["params"] == {"lr": "0.1", "nested/a": "1", "nested/b/c": "2"}
    assert ours["metrics"]["val_loss"] == [(2, 1.0), (5, 0.9)] and "bad key" in ours["metrics"]
    assert ours["status"] == "FINISHED" and ours["tags"] == {"team": "x", "mlflow.runName": "r1"}
    if log_model == "all":  # every checkpoint as it was saved; the first is still "latest" in its aliases
        assert set(ours["artifacts"]) == {f"epoch={e}-step={s}/{f}" for e, s in ((0, 3), (1, 6))
                                          for f in (f"epoch={e}-step={s}.ckpt", "metadata.yaml", "aliases.txt")}  # fmt: skip
    elif log_model:
        meta = ours["artifacts"]["epoch=1-step=6/metadata.yaml"]
        assert meta["original_filename"] == "epoch=1-step=6.ckpt" and meta["Checkpoint"]["monitor"] == "val_loss"
        assert ours["artifacts"]["epoch=1-step=6/aliases.txt"] == "['latest', 'best']"
    else:
        assert ours["artifacts"] == {}


def test_file_store_default_layout_and_checkpoints_under_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    logger = MLFlowLogger(experiment_name="exp")
    assert logger.save_dir == "./mlruns"
    trainer = fulmen.Trainer(max_epochs=1, logger=logger, log_every_n_steps=1, enable_progress_bar=False,
                             enable_model_summary=False)
    trainer.fit(_model_class(fulmen)())
    assert trainer.checkpoint_callback.dirpath.endswith(f"mlruns/{logger.name}/{logger.version}/checkpoints")
    read = _read(f"file:{tmp_path}/mlruns", logger.version)
    assert read["experiment"] == "exp" and [s for s, _ in read["metrics"]["train_loss"]] == [0, 1, 2]


def test_missing_package_names_the_extra(monkeypatch):
    # the module's availability flag decides (what Lightning's suites patch to simulate a missing package)
    monkeypatch.setattr("fulmen.loggers.mlflow._MLFLOW_AVAILABLE", False)
    with pytest.raises(ModuleNotFoundError, match=r"fulmen\[mlflow\]"):
        MLFlowLogger()

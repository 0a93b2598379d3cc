"""WandbLogger in W&B's offline mode (no account, no network): the run directory W&B writes, read back with
W&B's own protobuf records, holds the same config, history rows (with trainer/global_step) and model
artifacts as Lightning's WandbLogger writes."""

from __future__ import annotations

import pytest

pytest.importorskip("wandb", reason="the test extras install wandb")

import fulmen
from fulmen.loggers import WandbLogger
from fulmen.utilities.exceptions import MisconfigurationException
from tests.loggers.models import model_class
from tests.loggers.wandb_records import read_run
from tests.parity import oracle


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    for key in ("WANDB_PROJECT", "WANDB_RUN_ID", "WANDB_DIR"):
        monkeypatch.delenv(key, raising=False)
    yield
    import wandb

    if wandb.run is not None:
        wandb.finish()


def _model_class(pl):
    return model_class(pl, odd_metric_name=False)


def _run(pl, logger_cls, folder, log_model):
    import wandb

    folder.mkdir()
    logger = logger_cls(project="proj", name="r1", save_dir=str(folder), log_model=log_model)
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=folder / "ck", monitor="val_loss", save_top_k=1)
    trainer = pl.Trainer(max_epochs=2, log_every_n_steps=1, logger=logger, callbacks=[checkpoint],
                         enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(_model_class(pl)(nested={"a": 1, "b": {"c": 2}}))
    run_id = logger.version
    wandb.finish()
    run = read_run(str(folder))
    assert run["id"] == run_id
    run.pop("id")
    for artifact in run["artifacts"]:
        assert artifact.pop("name") == f"model-{run_id}"
    return run


@oracle.parity
@pytest.mark.slow
@pytest.mark.parametrize("log_model", [False, True, "all"])
def test_same_offline_run_as_lightnings_wandb_logger(tmp_path, offline, log_model):
    pl = oracle.lightning()
    ours = _run(fulmen, WandbLogger, tmp_path / "f", log_model)
    theirs = _run(pl, pl.loggers.WandbLogger, tmp_path / "l", log_model)
    assert ours == theirs
    assert ours["project"] == "proj" and ours["name"] == "r1"
    assert {k: v for k, v in ours["config"].items() if k != "_wandb"} == {"lr": 0.1, "nested": {"a": 1, "b": {"c": 2}}}
    steps = [row["trainer/global_step"] for row in ours["history"] if "train_loss" in row]
    assert steps == [0, 1, 2, 3, 4, 5]
    assert [row["val_loss"] for row in ours["history"] if "val_loss" in row] == [1, pytest.approx(0.9)]
    expected = {False: 0, True: 1, "all": 2}[log_model]
    assert len(ours["artifacts"]) == expected
    if expected:
        last = ours["artifacts"][-1]
        assert last["files"] == ["model.ckpt"] and sorted(last["aliases"]) == ["best", "latest"]
        assert last["metadata"]["original_filename"] == "epoch=1-step=6.ckpt"


def test_checkpoints_go_under_project_and_run_id(tmp_path, offline):
    import wandb

    logger = WandbLogger(project="proj", save_dir=str(tmp_path))
    trainer = fulmen.Trainer(max_epochs=1, logger=logger, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(_model_class(fulmen)())
    assert trainer.checkpoint_callback.dirpath == str(tmp_path / "proj" / logger.version / "checkpoints")
    logger.experiment.log({"extra": 1})  # the run object is W&B's own
    wandb.finish()


def test_offline_with_log_model_is_refused():
    with pytest.raises(MisconfigurationException, match="offline run cannot upload checkpoints"):
        WandbLogger(offline=True, log_model=True)

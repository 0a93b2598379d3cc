"""``TensorBoardLogger`` keeps ``hparams.yaml`` beside its events, also when nothing was logged."""

from __future__ import annotations

import os

import pytest

import fulmen
from fulmen import Trainer
from fulmen.core.saving import load_hparams_from_yaml
from fulmen.demos.boring_classes import BoringModel
from tests.parity import oracle

pytest.importorskip("tensorboard", reason="the test extras install tensorboard")

from fulmen.loggers import TensorBoardLogger


class WithHparams(BoringModel):
    def __init__(self, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()


@pytest.mark.parametrize("model_cls", [BoringModel, WithHparams])
def test_hparams_yaml_is_written_and_loads_back(tmp_path, model_cls):
    logger = TensorBoardLogger(tmp_path, name="tb")
    trainer = Trainer(max_steps=1, logger=logger, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model_cls())
    path = tmp_path / "tb" / "version_0" / TensorBoardLogger.NAME_HPARAMS_FILE
    assert load_hparams_from_yaml(path) == ({} if model_cls is BoringModel else {"lr": 0.1})
    loaded = model_cls.load_from_checkpoint(trainer.checkpoint_callback.best_model_path, hparams_file=path)
    assert isinstance(loaded, model_cls)


def test_log_graph_of_a_detached_model_and_what_it_cannot_trace(tmp_path):
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = BoringModel()
    logger = TensorBoardLogger(tmp_path, log_graph=True)
    logger.log_graph(model, torch.rand(2, 32))  # no trainer attached: tracing must not trip over `trainer`
    logger.finalize("success")
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    assert events.Graph() is not None
    model.example_input_array = None
    with pytest.warns(UserWarning, match="Could not log computational graph to TensorBoard: The `model.example_"):
        TensorBoardLogger(tmp_path, log_graph=True).log_graph(model)
    model.example_input_array = {"x": 1}
    with pytest.warns(UserWarning, match="can't be traced by TensorBoard"):
        TensorBoardLogger(tmp_path, log_graph=True).log_graph(model)


def test_save_dir_and_sub_dir_expand_user_and_environment_variables(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("RUNS", str(tmp_path))

    class Named(TensorBoardLogger):
        @property
        def name(self):
            return "name"

    monkeypatch.setenv("RUNS_SUB", "sub")
    logger = Named("$RUNS/tb", version="v", sub_dir="$RUNS_SUB")
    assert logger.log_dir == os.path.join(str(tmp_path), "tb", "name", "v", "sub")
    assert logger.sub_dir == "$RUNS_SUB"  # as given: log_dir expands it


def _hparams_events(pl, root, prefix, sub_dir):
    import glob

    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    class Joined(pl.loggers.TensorBoardLogger):
        LOGGER_JOIN_CHAR = "/"

    logger = Joined(root, name="tb", version=0, prefix=prefix, sub_dir=sub_dir, default_hp_metric=False)
    logger.log_hyperparams({"lr": 0.1}, metrics={"acc": 0.5}, step=7)
    logger.log_hyperparams(params={"depth": 2}, metrics=0.25, step=9)  # a single value is hp_metric
    logger.finalize("success")
    scalars: dict[str, list] = {}
    plugin_steps = []
    for path in sorted(glob.glob(os.path.join(logger.log_dir, "events.out.tfevents.*"))):
        for event in EventFileLoader(path).Load():
            for value in event.summary.value:
                if value.metadata.plugin_data.plugin_name == "hparams":
                    plugin_steps.append(event.step)
                else:
                    scalars.setdefault(value.tag, []).append((event.step, round(value.tensor.float_val[0], 6)))
    return logger.sub_dir, os.path.relpath(logger.log_dir, root), scalars, plugin_steps


@oracle.parity
def test_join_char_sub_dir_and_hparams_step_as_lightning(tmp_path):
    assert TensorBoardLogger.LOGGER_JOIN_CHAR == oracle.lightning().loggers.TensorBoardLogger.LOGGER_JOIN_CHAR == "-"
    ours = _hparams_events(fulmen, tmp_path / "f", "train", "extra")
    assert ours == _hparams_events(oracle.lightning(), tmp_path / "l", "train", "extra")
    assert ours[:2] == ("extra", os.path.join("tb", "version_0", "extra"))
    assert ours[2] == {"train/acc": [(7, 0.5)], "train/hp_metric": [(9, 0.25)]} and ours[3] == [7] * 3 + [9] * 3


def _without(monkeypatch, *packages):
    """Both frameworks see ``packages`` ("tensorboard", "tensorboardX") as not installed."""
    from lightning.fabric.loggers import tensorboard as theirs

    from fulmen.utilities import imports as ours

    for package in packages:
        for flags in (ours, theirs):
            flag = getattr(flags, "_TENSORBOARDX_AVAILABLE" if package == "tensorboardX" else "_TENSORBOARD_AVAILABLE")
            monkeypatch.setattr(flag, "available", False, raising=False)
            hint = f"Requirement {package!r} not met. HINT: Try running `pip install -U {package!r}`"
            monkeypatch.setattr(flag, "message", hint, raising=False)


def _default_logger_run(tmp_path, name):
    from tests.parity.recorded import boring_model, run

    seen = {}

    def program(pl):
        trainer = pl.Trainer(default_root_dir=tmp_path / name, max_steps=2, limit_val_batches=1, log_every_n_steps=1,
                             enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
        trainer.fit(boring_model(pl)())
        logger = trainer.logger
        seen.update(logger=type(logger).__name__, version=logger.version, log_dir=os.path.relpath(logger.log_dir, tmp_path / name))
        if seen["logger"] == "TensorBoardLogger":
            seen["writer"] = type(logger.experiment).__module__.split(".")[0]
        seen["files"] = sorted(os.path.relpath(os.path.join(d, f), tmp_path / name).split("events.out")[0]
                               for d, _, files in os.walk(tmp_path / name) for f in files)  # fmt: skip
        pl.Trainer(default_root_dir=tmp_path / name)  # the warning is said once per process

    outcome = run(name, program, r"tensorboard")
    return outcome, seen


@oracle.parity
@pytest.mark.parametrize("missing", [("tensorboard", "tensorboardX"), ("tensorboard",)])
def test_the_default_logger_without_tensorboard_is_lightnings(tmp_path, monkeypatch, missing):
    """Neither package: CSVLogger, with Lightning's warning (once per process). tensorboardX alone: the
    TensorBoardLogger writes through tensorboardX's SummaryWriter."""
    if "tensorboardX" not in missing:
        pytest.importorskip("tensorboardX", reason="the test extras install tensorboardX")
    from lightning.pytorch.trainer.connectors.logger_connector import logger_connector as theirs

    from fulmen.trainer.connectors.logger_connector import logger_connector as ours
    from fulmen.utilities.rank_zero import WarningCache

    _without(monkeypatch, *missing)
    monkeypatch.setattr(ours, "warning_cache", WarningCache())
    monkeypatch.setattr(theirs, "warning_cache", type(theirs.warning_cache)())
    (ours_run, ours_seen), (theirs_run, theirs_seen) = (_default_logger_run(tmp_path, n) for n in ("fulmen", "lightning"))
    assert ours_run == theirs_run and ours_run.error is None, (ours_run, theirs_run)
    assert ours_seen == theirs_seen
    if "tensorboardX" in missing:
        assert ours_seen["logger"] == "CSVLogger" and ours_run.warnings == [("UserWarning", (
            "Starting from v1.9.0, `tensorboardX` has been removed as a dependency of the `lightning.pytorch` package, "
            "due to potential conflicts with other packages in the ML ecosystem. For this reason, `logger=True` will "
            "use `CSVLogger` as the default logger, unless the `tensorboard` or `tensorboardX` packages are found. "
            "Please `pip install lightning[extra]` or one of them to enable TensorBoard support by default"
        ))]  # fmt: skip
    else:
        assert ours_seen["writer"] == "tensorboardX" and not ours_run.warnings


@oracle.parity
def test_log_graph_needs_tensorboard_as_in_lightning(tmp_path, monkeypatch):
    pytest.importorskip("tensorboardX", reason="the test extras install tensorboardX")
    from tests.parity.recorded import both

    _without(monkeypatch, "tensorboard")
    ours, theirs = both(lambda pl: pl.loggers.TensorBoardLogger(tmp_path, log_graph=True), r"tensorboard")
    assert ours == theirs and ours.warnings == [("UserWarning", (
        "You set `TensorBoardLogger(log_graph=True)` but `tensorboard` is not available.\n"
        "Requirement 'tensorboard' not met. HINT: Try running `pip install -U 'tensorboard'`"
    ))]  # fmt: skip
    _without(monkeypatch, "tensorboardX")
    ours, theirs = both(lambda pl: pl.loggers.TensorBoardLogger(tmp_path), r"tensorboard")
    assert ours.error == theirs.error == "ModuleNotFoundError"


@oracle.parity
@pytest.mark.parametrize(("job_name", "version"), [("train", 4242), ("bash", 0)])
def test_the_default_logger_is_named_after_the_slurm_job(tmp_path, monkeypatch, job_name, version):
    """Under a SLURM batch job the default TensorBoardLogger's version is the job id (not in an interactive
    ``salloc`` shell, whose logs must not share a job's id)."""
    from tests.parity.recorded import framework

    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NAME", job_name)
    monkeypatch.setenv("SLURM_NTASKS", "1")
    for name in ("fulmen", "lightning"):
        logger = framework(name).Trainer(default_root_dir=tmp_path / name).logger
        assert (type(logger).__name__, logger.version) == ("TensorBoardLogger", version)
        assert logger.log_dir == str(tmp_path / name / "lightning_logs" / f"version_{version}")


def test_reading_the_experiment_after_the_run_opens_no_new_event_file(tmp_path):
    """As in Lightning, the writer closed at the end of the run stays the logger's: reading `logger.experiment`
    afterwards (to check its type, say) does not start a second event file (one more second has passed, so a
    new file would get a new name)."""
    pytest.importorskip("tensorboard", reason="the test extras install tensorboard")
    import time

    from fulmen.demos.boring_classes import BoringModel

    trainer = fulmen.Trainer(default_root_dir=tmp_path, max_steps=2, limit_val_batches=0, enable_progress_bar=False,
                             enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    trainer.fit(BoringModel())
    time.sleep(1.1)
    assert trainer.logger.experiment is not None
    events = [f for _, _, files in os.walk(tmp_path) for f in files if f.startswith("events.out")]
    assert len(events) == 1, events

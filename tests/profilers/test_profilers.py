"""Profilers: every hook and loop stage recorded once, under Lightning's action names; the reports and trace
files they write, read back (pstats for cProfile dumps, JSON for Chrome / TensorBoard traces)."""

from __future__ import annotations

import json
import logging
import pstats

import pytest
import torch

from fulmen import Trainer
from fulmen.demos.boring_classes import BoringModel
from fulmen.profilers import AdvancedProfiler, PassThroughProfiler, PyTorchProfiler, SimpleProfiler
from fulmen.runtime.hooks import HookDispatcher, ProfilingHookDispatcher
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle


def _fit(profiler, tmp_path, **kwargs):
    options = dict(max_epochs=1, limit_train_batches=3, limit_val_batches=2, num_sanity_val_steps=0, logger=False,
                   enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer = Trainer(profiler=profiler, **{**options, **kwargs})
    trainer.fit(BoringModel())
    return trainer


def test_flag_values_and_the_plain_dispatcher_without_a_profiler(tmp_path):
    assert isinstance(Trainer(profiler="simple").profiler, SimpleProfiler)
    assert isinstance(Trainer(profiler="advanced").profiler, AdvancedProfiler)
    assert isinstance(Trainer(profiler="pytorch").profiler, PyTorchProfiler)
    trainer = Trainer()
    assert isinstance(trainer.profiler, PassThroughProfiler)
    assert type(trainer.run_context.hooks) is HookDispatcher  # nothing wrapped: the hot loop pays nothing
    assert type(Trainer(profiler=PassThroughProfiler()).run_context.hooks) is HookDispatcher
    assert type(Trainer(profiler="simple").run_context.hooks) is ProfilingHookDispatcher
    with pytest.raises(MisconfigurationException, match="profiler='fast'.*advanced"):
        Trainer(profiler="fast")
    with pytest.raises(MisconfigurationException, match="got a int"):
        Trainer(profiler=3)


def test_simple_profiler_records_each_stage_once(tmp_path):
    profiler = SimpleProfiler(dirpath=tmp_path, filename="perf")
    _fit(profiler, tmp_path)
    calls = {name: len(d) for name, d in profiler.recorded_durations.items()}
    expected = {
        "run_training_epoch": 1, "run_training_batch": 3, "[_TrainingEpochLoop].train_dataloader_next": 3,
        "[Strategy]SingleDeviceStrategy.training_step": 3, "[Strategy]SingleDeviceStrategy.backward": 3,
        "[LightningModule]BoringModel.optimizer_step": 3, "[LightningModule]BoringModel.optimizer_zero_grad": 3,
        "[Strategy]SingleDeviceStrategy.batch_to_device": 5, "[Strategy]SingleDeviceStrategy.validation_step": 2,
        "[_EvaluationLoop].val_next": 2, "run_validation": 1, "save_checkpoint": 1,
        "[LightningModule]BoringModel.configure_optimizers": 1,
    }  # fmt: skip
    assert {name: calls.get(name) for name in expected} == expected
    key = "[Callback]ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, 'train_time_interval': None}"
    assert calls[f"{key}.on_train_epoch_end"] == 1
    assert not profiler.current_actions, "every action that started also stopped"
    report = (tmp_path / "fit-perf.txt").read_text()
    assert report.startswith("FIT Profiler Report")
    assert "run_training_batch" in report and "Mean duration (s)" in report and "Total" in report


@oracle.parity
def test_action_names_are_lightnings(tmp_path):
    """Every action fulmen records for a module hook, a callback hook or a strategy step is one Lightning
    records for the same run. fulmen adds run_validation; it records no hook left at a no-op."""
    pl = oracle.lightning()
    from lightning.pytorch.demos.boring_classes import BoringModel as LBoring
    from lightning.pytorch.profilers import SimpleProfiler as LSimple

    theirs = LSimple()
    pl.Trainer(max_epochs=1, limit_train_batches=3, limit_val_batches=2, num_sanity_val_steps=0, profiler=theirs,
               logger=False, enable_progress_bar=False, enable_model_summary=False,
               default_root_dir=tmp_path / "l").fit(LBoring())  # fmt: skip
    ours = SimpleProfiler()
    _fit(ours, tmp_path / "f")
    extra = set(ours.recorded_durations) - set(theirs.recorded_durations)
    assert extra == {"run_validation"}
    for name in ("run_training_batch", "[Strategy]SingleDeviceStrategy.training_step", "[_EvaluationLoop].val_next"):
        assert len(ours.recorded_durations[name]) == len(theirs.recorded_durations[name])


def test_report_is_printed_when_no_file_is_named(tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        _fit(SimpleProfiler(extended=False), tmp_path)
    report = next(r.getMessage() for r in caplog.records if "Profiler Report" in r.getMessage())
    assert "Num calls" not in report and "run_training_batch" in report


def test_advanced_profiler_reports_and_dumps_pstats(tmp_path):
    profiler = AdvancedProfiler(dirpath=tmp_path, filename="adv", dump_stats=True)
    _fit(profiler, tmp_path)
    report = (tmp_path / "fit-adv.txt").read_text()
    assert "Profile stats for: run_training_batch" in report and "function calls" in report
    stats = pstats.Stats(str(tmp_path / "fit-adv-run_training_batch.prof"))
    assert stats.total_calls > 0  # type: ignore[attr-defined]


def test_pytorch_profiler_trace_names_hooks_and_layers(tmp_path):
    profiler = PyTorchProfiler(dirpath=tmp_path, filename="torch", row_limit=5)
    model = BoringModel()
    trainer = Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0,
                      profiler=profiler, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model)
    trace = json.loads((tmp_path / "fit-torch.pt.trace.json").read_text())
    names = {event.get("name") for event in trace["traceEvents"]}
    assert {"run_training_batch", "[Strategy]SingleDeviceStrategy.training_step",
            "[pl][module]torch.nn.modules.linear.Linear: layer", "aten::addmm"} <= names  # fmt: skip
    assert "Profile stats for: records" in (tmp_path / "fit-torch.txt").read_text()
    assert not model.layer._forward_hooks and not model.layer._forward_pre_hooks  # labels removed after the run


def test_pytorch_profiler_tensorboard_traces_with_a_schedule(tmp_path):
    handler = torch.profiler.tensorboard_trace_handler(str(tmp_path / "tb"))
    profiler = PyTorchProfiler(on_trace_ready=handler, schedule=torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1))
    _fit(profiler, tmp_path, max_steps=6, limit_train_batches=6)
    files = list((tmp_path / "tb").glob("*.pt.trace.json"))
    # the schedule runs per stage (as Lightning's): one window of training steps (repeat=1), and the validation
    # steps' own window, written when the run ends
    steps = sorted(
        sum(e.get("name") == "[Strategy]SingleDeviceStrategy.training_step" for e in json.loads(f.read_text())["traceEvents"])
        for f in files
    )  # fmt: skip
    assert steps == [0, 2]  # the two active training steps of the schedule, in one trace


def test_pytorch_profiler_argument_errors():
    with pytest.raises(MisconfigurationException, match="sort_by_key='wall'"):
        PyTorchProfiler(sort_by_key="wall")
    with pytest.raises(KeyError, match="row_limit"):
        PyTorchProfiler(table_kwargs={"row_limit": 3})


def test_profile_and_profile_iterable_for_user_code():
    profiler = SimpleProfiler()
    with profiler.profile("load"):
        pass
    assert list(profiler.profile_iterable(range(3), "items")) == [0, 1, 2]
    assert len(profiler.recorded_durations["load"]) == 1 and len(profiler.recorded_durations["items"]) == 4
    with pytest.raises(ValueError, match="never started"):
        profiler.stop("nothing")

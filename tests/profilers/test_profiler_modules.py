"""Lightning's profiler module paths: PassThroughProfiler in ``base``, XLAProfiler's refusal, and
``pytorch.RegisterRecordFunction`` / ``pytorch.ScheduleWrapper`` doing what Lightning's do (the PyTorch profiler
uses both)."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerAction

import fulmen
from fulmen.profilers import PassThroughProfiler, PyTorchProfiler, XLAProfiler
from fulmen.profilers.base import PassThroughProfiler as FromBase
from fulmen.profilers.pytorch import RegisterRecordFunction, ScheduleWrapper
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle


def test_pass_through_profiler_lives_in_base_and_records_nothing():
    assert PassThroughProfiler is FromBase
    assert isinstance(fulmen.Trainer().profiler, FromBase)
    profiler = FromBase(dirpath=".", filename="nothing")
    with profiler.profile("action"):
        pass
    assert profiler.summary() == ""


@oracle.parity
def test_xla_profiler_needs_torch_xla_as_in_lightning(monkeypatch):
    oracle.lightning()
    from lightning.pytorch.profilers import XLAProfiler as Theirs

    monkeypatch.setattr(Theirs, "__del__", lambda self: None)  # it fails on the half-made object
    with pytest.raises(ModuleNotFoundError):
        Theirs()
    with pytest.raises(ModuleNotFoundError, match="torch_xla.*profiler='pytorch'"):
        XLAProfiler()
    monkeypatch.setattr("fulmen.profilers.xla._XLA_AVAILABLE", True)  # the module's flag decides, as in Lightning
    profiler = XLAProfiler(port=9100)
    assert profiler.port == 9100
    profiler.start("run_training_epoch")  # not a recorded action: nothing to refuse
    with pytest.raises(MisconfigurationException, match="XLAProfiler.*not supported by fulmen"):
        profiler.start("[Strategy]SingleDeviceStrategy.training_step")


def _nested_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(8, 2)))


def _module_ranges(register, model) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, register(model):
        model(torch.ones(3, 4))
    return sorted(e.name for e in prof.events() if e.name.startswith("[pl][module]"))


@oracle.parity
def test_register_record_function_labels_the_layers_as_lightnings():
    oracle.lightning()
    from lightning.pytorch.profilers.pytorch import RegisterRecordFunction as Theirs

    model = _nested_model()
    ours = _module_ranges(RegisterRecordFunction, model)
    assert ours == _module_ranges(Theirs, model)
    assert "[pl][module]torch.nn.modules.linear.Linear: 1.1" in ours and len(ours) == 4  # 0, 1, 1.0, 1.1
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())  # removed on exit


def test_a_layer_that_raised_leaves_no_range_open():
    class Failing(torch.nn.Module):
        def forward(self, x):
            raise RuntimeError("boom")

    model = torch.nn.Sequential(Failing())
    register = RegisterRecordFunction(model)
    with pytest.raises(RuntimeError, match="boom"), register:
        model(torch.ones(1))
    assert all(not stack for stack in register._open.values())


def _drive(wrapper, start: str, steps: list[str]) -> list[tuple]:
    wrapper.setup(start)
    seen = [wrapper(0)]  # torch asks once before any step: no stage yet
    for step in steps:
        wrapper.pre_step(step)
        action = wrapper(0)
        seen.append((step, action, wrapper.num_step, wrapper.has_finished, wrapper.is_training, wrapper.is_validating))
    return seen


_FIT = (["[Strategy]DDPStrategy.validation_step"] * 2  # the sanity check: not counted in a fit
        + ["[Strategy]DDPStrategy.training_step"] * 4 + ["[Strategy]DDPStrategy.validation_step"] * 3
        + ["[Strategy]DDPStrategy.training_step"] * 4 + ["[Strategy]DDPStrategy.validation_step"] * 3)  # fmt: skip


@oracle.parity
@pytest.mark.parametrize(
    ("start", "steps"),
    [
        ("[LightningModule]Model.on_fit_start", _FIT),
        ("[LightningModule]Model.on_validation_start", ["[Strategy]S.validation_step"] * 7),
        ("[LightningModule]Model.on_test_start", ["[Strategy]S.test_step"] * 6),
        ("[LightningModule]Model.on_predict_start", ["[Strategy]S.predict_step"] * 6 + ["run_other"]),
    ],
)
@pytest.mark.parametrize("schedule", [dict(wait=1, warmup=1, active=2), dict(wait=0, warmup=1, active=1, repeat=2),
                                      dict(skip_first=1, wait=1, warmup=1, active=1)])  # fmt: skip
def test_schedule_wrapper_counts_each_stage_as_lightnings(start, steps, schedule):
    oracle.lightning()
    from lightning.pytorch.profilers.pytorch import ScheduleWrapper as Theirs

    ours = _drive(ScheduleWrapper(torch.profiler.schedule(**schedule)), start, steps)
    theirs = _drive(Theirs(torch.profiler.schedule(**schedule)), start, steps)
    assert ours == theirs
    assert any(step[1] == ProfilerAction.RECORD_AND_SAVE for step in ours[1:])  # a window was recorded


def test_schedule_wrapper_reset_forgets_the_run():
    wrapper = ScheduleWrapper(torch.profiler.schedule(wait=0, warmup=0, active=1))
    first = _drive(wrapper, "on_test_start", ["S.test_step"] * 2)
    wrapper.reset()
    assert _drive(wrapper, "on_test_start", ["S.test_step"] * 2) == first
    assert [entry[1] for entry in first[1:]] == [ProfilerAction.RECORD_AND_SAVE, ProfilerAction.NONE]


@oracle.parity
def test_pytorch_profiler_refuses_a_schedule_lightning_refuses():
    pl = oracle.lightning()
    from lightning.pytorch.profilers import PyTorchProfiler as Theirs

    for schedule in ("every step", lambda step: "record"):
        with pytest.raises(pl.utilities.exceptions.MisconfigurationException):
            Theirs(schedule=schedule)
        with pytest.raises(MisconfigurationException, match="schedule"):
            PyTorchProfiler(schedule=schedule)


@oracle.parity
def test_a_schedule_windows_each_stage_as_lightnings(tmp_path):
    """The same schedule writes as many traces, holding as many training steps each, as Lightning's profiler."""
    import json

    pl = oracle.lightning()
    from lightning.pytorch.demos.boring_classes import BoringModel as TheirModel
    from lightning.pytorch.profilers import PyTorchProfiler as Theirs

    from fulmen.demos.boring_classes import BoringModel

    def traces(framework, profiler_cls, model, name):
        handler = torch.profiler.tensorboard_trace_handler(str(tmp_path / name))
        profiler = profiler_cls(on_trace_ready=handler, schedule=torch.profiler.schedule(wait=1, warmup=1, active=2))
        framework.Trainer(profiler=profiler, max_epochs=2, limit_train_batches=5, limit_val_batches=3, logger=False,
                          enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                          default_root_dir=tmp_path / name).fit(model)  # fmt: skip
        counts = []
        for path in (tmp_path / name).glob("*.pt.trace.json"):
            names = [str(e.get("name")) for e in json.loads(path.read_text())["traceEvents"]]
            counts.append((sum(n.endswith("training_step") for n in names), sum(n.endswith("validation_step") for n in names)))
        return sorted(counts)

    ours = traces(fulmen, PyTorchProfiler, BoringModel(), "ours")
    assert ours == traces(pl, Theirs, TheirModel(), "theirs")
    assert len(ours) == 2 and any(train and not validation for train, validation in ours)  # a training window

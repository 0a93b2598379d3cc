"""Callback names Lightning programs import, against Lightning's: ``callbacks.checkpoint.Checkpoint`` (the base
of both checkpoint callbacks), ``prediction_writer.WriteInterval``, ``timer.Interval``,
``StochasticWeightAveraging(swa_lrs)`` and the rich progress columns."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from fulmen import Trainer
from fulmen.callbacks import Checkpoint, ModelCheckpoint, OnExceptionCheckpoint, StochasticWeightAveraging
from fulmen.callbacks.prediction_writer import BasePredictionWriter, WriteInterval
from fulmen.callbacks.timer import Interval, Timer
from tests.parity import oracle


def test_both_checkpoint_callbacks_are_checkpoints(tmp_path):
    from fulmen.callbacks import checkpoint, model_checkpoint

    assert checkpoint.Checkpoint is Checkpoint is model_checkpoint.Checkpoint
    assert isinstance(ModelCheckpoint(), Checkpoint) and isinstance(OnExceptionCheckpoint(tmp_path), Checkpoint)

    class Mine(Checkpoint):  # a library's own checkpointing: the trainer adds no default ModelCheckpoint
        pass

    trainer = Trainer(callbacks=[Mine()], logger=False, default_root_dir=tmp_path)
    assert not any(isinstance(cb, ModelCheckpoint) for cb in trainer.callbacks)
    assert any(isinstance(cb, ModelCheckpoint) for cb in Trainer(logger=False, default_root_dir=tmp_path).callbacks)


@oracle.parity
def test_write_interval_and_interval_are_lightnings_enums():
    oracle.lightning()
    from lightning.pytorch.callbacks.prediction_writer import WriteInterval as TheirWriteInterval
    from lightning.pytorch.callbacks.timer import Interval as TheirInterval

    assert [(m.name, m.value) for m in WriteInterval] == [(m.name, m.value) for m in TheirWriteInterval]
    for mine, theirs in zip(WriteInterval, TheirWriteInterval):
        assert (mine.on_batch, mine.on_epoch) == (theirs.on_batch, theirs.on_epoch)
        assert mine == theirs.value and isinstance(mine, str)
    assert [(m.name, m.value) for m in Interval] == [(m.name, m.value) for m in TheirInterval]
    writer = BasePredictionWriter("batch_and_epoch")
    assert writer.interval is WriteInterval.BATCH_AND_EPOCH and writer.interval.on_batch and writer.interval.on_epoch
    assert BasePredictionWriter(WriteInterval.EPOCH).interval == "epoch"
    assert Timer(interval=Interval.epoch)._interval == "epoch"


@oracle.parity
def test_swa_lrs_is_required_as_in_lightning():
    pl = oracle.lightning()
    with pytest.raises(TypeError, match="swa_lrs"):
        pl.callbacks.StochasticWeightAveraging()
    with pytest.raises(TypeError, match="swa_lrs"):
        StochasticWeightAveraging()  # type: ignore[call-arg]
    assert StochasticWeightAveraging(0.05).swa_lrs == 0.05
    # 1.x's Trainer(stochastic_weight_avg=True) still adds one that keeps each group's learning rate
    trainer = Trainer(stochastic_weight_avg=True, logger=False)
    assert [cb.swa_lrs for cb in trainer.callbacks if isinstance(cb, StochasticWeightAveraging)] == [None]


@pytest.mark.slow  # a fresh interpreter imports fulmen
def test_the_rich_module_imports_without_rich():
    code = ("import sys, fulmen, fulmen.callbacks.progress.rich_progress as r; "
            "assert 'rich' not in sys.modules, 'rich imported'; r.RichProgressBarTheme(); "
            "r.CustomProgress; assert 'rich' in sys.modules")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True)


rich = pytest.importorskip("rich", reason="the test extras install rich")


def _columns():
    oracle.lightning()
    from lightning.pytorch.callbacks.progress import rich_progress as theirs

    from fulmen.callbacks.progress import rich_progress as ours

    return ours, theirs


def _render(column, task) -> str:
    from rich.console import Console

    console = Console(width=80, color_system=None, force_terminal=False)
    with console.capture() as capture:
        console.print(column.render(task))
    return capture.get()


@oracle.parity
def test_rich_columns_render_as_lightnings():
    ours, theirs = _columns()
    from rich import progress as rp

    names = ("CustomBarColumn", "CustomInfiniteTask", "CustomProgress", "CustomTimeColumn", "BatchesProcessedColumn",
             "ProcessingSpeedColumn", "MetricsTextColumn")  # fmt: skip
    for name in names:
        assert [b.__name__ for b in getattr(ours, name).__mro__[1:]] == [b.__name__ for b in getattr(theirs, name).__mro__[1:]]
    assert issubclass(ours.CustomProgress, rp.Progress) and issubclass(ours.CustomBarColumn, rp.BarColumn)

    clock = iter(float(i) for i in range(1000))
    for total, done in ((10, 4), (float("inf"), 7)):
        progress_mine = ours.CustomProgress(get_time=lambda: next(clock), auto_refresh=False, disable=True)
        progress_theirs = theirs.CustomProgress(get_time=lambda: next(clock), auto_refresh=False, disable=True)
        tasks = []
        for progress in (progress_mine, progress_theirs):
            task_id = progress.add_task("Epoch 0", total=total)
            progress.update(task_id, completed=done)
            tasks.append(next(t for t in progress.tasks if t.id == task_id))
        mine, reference = tasks
        assert type(mine).__name__ == type(reference).__name__
        if total == float("inf"):
            assert mine.time_remaining is None and reference.time_remaining is None
        for column_name in ("BatchesProcessedColumn", "ProcessingSpeedColumn"):
            assert _render(getattr(ours, column_name)("dim"), mine) == _render(getattr(theirs, column_name)("dim"), reference)
        bar_mine, bar_theirs = ours.CustomBarColumn().render(mine), theirs.CustomBarColumn().render(reference)
        assert (bar_mine.total, bar_mine.completed, bar_mine.pulse) == (
            bar_theirs.total if total != float("inf") else None, bar_theirs.completed, bar_theirs.pulse)  # fmt: skip
        time_text = _render(ours.CustomTimeColumn("dim"), mine)
        assert time_text.count("•") == 1 and time_text.strip().endswith(
            "-:--:--" if total == float("inf") else _render(theirs.CustomTimeColumn("dim"), reference).strip()[-7:]
        )


@oracle.parity
def test_metrics_column_formats_as_lightnings():
    ours, theirs = _columns()

    class State:
        fn = "fit"

    class FakeTrainer:
        state, sanity_checking, training = State(), False, True

        class progress_bar_callback:
            train_progress_bar_id = 0

    mine = ours.MetricsTextColumn(FakeTrainer(), "italic", " | ", ".2e")
    metrics = {"loss": 0.1234, "v_num": 3, "name": "x", "nested": {"a": 1}}
    mine.update(metrics)
    task = type("Task", (), {"id": 0})()
    assert mine.render(task).plain == " | ".join(
        ["loss: 1.23e-01", "v_num: 3.00e+00", "name: x", "nested: {'a': 1}"]
    ) == " | ".join(theirs.MetricsTextColumn._generate_metrics_texts(mine))  # Lightning's own formatting of ours
    assert mine.render(type("Task", (), {"id": 1})()).plain == ""  # only the training bar's row shows them


@oracle.parity
def test_rich_progress_bar_defaults_are_lightnings():
    ours, theirs = _columns()

    def shape(cls):
        return [(p.name, p.kind) for p in inspect.signature(cls).parameters.values()]

    assert shape(ours.RichProgressBar) == shape(theirs.RichProgressBar)
    mine = ours.RichProgressBar()
    assert mine.refresh_rate == theirs.RichProgressBar().refresh_rate == 100
    assert vars(mine.theme) == vars(theirs.RichProgressBarTheme())
    assert [type(c).__name__ for c in mine.configure_columns(None)] == [
        type(c).__name__ for c in theirs.RichProgressBar().configure_columns(None)
    ]
    with pytest.raises(ValueError, match="refresh_rate"):
        ours.RichProgressBar(refresh_rate=-1)

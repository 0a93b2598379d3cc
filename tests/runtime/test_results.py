"""``ResultCollection``: what ``self.log`` stores (tensors on the device, epoch values as running sums)."""

from __future__ import annotations

import pytest
import torch

from fulmen.runtime.results import ResultCollection, to_scalars
from fulmen.utilities.exceptions import MisconfigurationException

CPU = torch.device("cpu")


def test_epoch_means_are_weighted_by_batch_size_and_other_reductions_hold():
    results = ResultCollection(training=False)
    for value, size in ((1.0, 1), (4.0, 3)):
        results.set_batch(torch.zeros(size, 2))
        results.log("validation_step", "mean", torch.tensor(value), CPU)
        results.log("validation_step", "sum", value, CPU, reduce_fx="sum")
        results.log("validation_step", "max", value, CPU, reduce_fx=torch.max)
        results.log("validation_step", "min", value, CPU, reduce_fx="min")
    callback, logged, pbar = results.metrics(epoch=True)
    assert to_scalars(callback) == {"mean": 3.25, "sum": 5.0, "max": 4.0, "min": 1.0}  # (1*1 + 4*3) / 4
    assert logged.keys() == callback.keys() and pbar == {}
    assert all(isinstance(v, torch.Tensor) for v in callback.values())  # no conversion until a reader asks


def test_the_builtin_reductions_are_accepted():
    results = ResultCollection(training=False)
    for value in (1.0, 4.0, 2.0):
        results.set_batch(torch.zeros(1, 2))
        results.log("validation_step", "max", value, CPU, reduce_fx=max)
        results.log("validation_step", "min", value, CPU, reduce_fx=min)
        results.log("validation_step", "sum", value, CPU, reduce_fx=sum)
    assert to_scalars(results.metrics(epoch=True)[0]) == {"max": 4.0, "min": 1.0, "sum": 7.0}


def test_step_and_epoch_values_are_forked_by_name_and_routed_by_flags():
    results = ResultCollection(training=True)
    results.set_batch(torch.zeros(2, 1))
    results.log("training_step", "loss", torch.tensor(2.0), CPU, on_step=True, on_epoch=True, prog_bar=True)
    results.log("training_step", "hidden", torch.tensor(1.0), CPU, logger=False)
    step_cb, step_log, step_bar = results.metrics(epoch=False)
    assert set(step_cb) == {"loss_step", "loss", "hidden"} and set(step_log) == {"loss_step"}
    assert set(step_bar) == {"loss_step"}
    epoch_cb, epoch_log, _ = results.metrics(epoch=True)
    assert set(epoch_cb) == {"loss_epoch", "loss"} and set(epoch_log) == {"loss_epoch"}


def test_dataloader_index_suffix():
    results = ResultCollection(training=False)
    for idx in (0, 1):
        results.set_batch(torch.zeros(1), dataloader_idx=idx)
        results.log("validation_step", "acc", float(idx), CPU)
    callback, _, _ = results.metrics(epoch=True)
    assert set(callback) == {"acc/dataloader_idx_0", "acc/dataloader_idx_1"}


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([("training_step", "x", torch.ones(3), {})], r"tensor of shape \(3,\)"),
        ([("training_step", "x", "text", {})], r"`str` values cannot be logged"),
        ([("configure_optimizers", "x", 1.0, {})], r"where logging is not supported"),
        ([("on_train_epoch_end", "x", 1.0, {"on_step": True})], r"on_step=True\) is not allowed"),
        ([("training_step", "x", 1.0, {"on_step": False, "on_epoch": False})], r"would never record"),
        ([("training_step", "x", 1.0, {}), ("training_step", "x", 1.0, {"prog_bar": True})], r"different arguments"),
        ([("training_step", "x", 1.0, {"reduce_fx": "median"})], r"reduce_fx='median'"),
    ],
)
def test_misuse_is_refused(calls, message):
    results = ResultCollection(training=True)
    results.set_batch(torch.zeros(1))
    with pytest.raises(MisconfigurationException, match=message):
        for fx, name, value, options in calls:
            results.log(fx, name, value, CPU, **options)


def test_sync_dist_values_are_reduced_where_every_rank_is_and_never_by_a_read():
    calls = []

    def sync(tensor, op):
        calls.append(op)
        return tensor * 2  # a stand-in for a two-rank sum

    results = ResultCollection(training=False)
    results.sync = sync
    results.set_batch(torch.zeros(1))
    results.log("validation_step", "loss", 3.0, CPU, sync_dist=True, reduce_fx="sum")
    assert to_scalars(results.metrics(epoch=True, reading=True)[0]) == {"loss": 3.0}  # a read: local value
    assert calls == []
    results.reduce_epoch()
    assert calls == ["sum"]
    assert to_scalars(results.metrics(epoch=True, reading=True)[0]) == {"loss": 6.0}  # kept once reduced


def test_reset_forgets_values_and_resets_metric_objects():
    class Metric:  # a torchmetrics.Metric, duck-typed
        def __init__(self):
            self.resets = 0

        def update(self, *args):
            pass

        def compute(self):
            return torch.tensor(0.5)

        def reset(self):
            self.resets += 1

    metric = Metric()
    results = ResultCollection(training=False)
    results.set_batch(torch.zeros(1))
    results.log("validation_step", "acc", metric, CPU)
    assert to_scalars(results.metrics(epoch=True)[0]) == {"acc": 0.5}
    results.reset()
    assert results.items == {} and metric.resets == 1

"""``ResultCollection``: what ``self.log`` stores (tensors on the device, epoch values as running sums)."""

from __future__ import annotations

import pytest
import torch

from fulmen.runtime.results import ResultCollection, to_scalars
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle

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


@pytest.mark.parity
def test_epoch_end_values_and_callback_metrics_are_kept_as_in_lightning(tmp_path):
    """A value logged after its batch ended (an epoch-end hook) counts with batch size 1: the last batch (here
    of an ambiguous size) is not looked into; ``callback_metrics`` holds a name's plain key first, then the
    forked ones."""
    from lightning.pytorch.utilities import data as theirs_data

    from fulmen.utilities import data as ours_data
    from fulmen.utilities.rank_zero import WarningCache
    from tests.parity.recorded import boring_model, both

    seen = {}

    def program(pl):
        class Model(boring_model(pl)):
            def training_step(self, batch, batch_idx):
                out = super().training_step(batch[0], batch_idx)
                self.log("loss", out["loss"], on_step=True, on_epoch=True, batch_size=4)  # none to look for
                return out

            def on_train_epoch_end(self):
                self.log("end", float(self.current_epoch + 1), on_epoch=True)
                self.log("both", 2.0, on_step=False, on_epoch=True)
                seen[pl.__name__] = {k: float(v) for k, v in self.trainer.callback_metrics.items()}
                seen[pl.__name__ + " keys"] = list(self.trainer.callback_metrics)

        data = torch.utils.data.TensorDataset(torch.randn(6, 32), torch.randn(6, 1))
        loader = torch.utils.data.DataLoader(torch.utils.data.ConcatDataset([data]), batch_size=4,
                                             collate_fn=lambda b: [torch.stack([x for x, _ in b]), torch.randn(1)])  # fmt: skip
        pl.Trainer(default_root_dir=tmp_path, max_epochs=1, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, enable_checkpointing=False).fit(Model(), loader)  # fmt: skip

    import unittest.mock

    with unittest.mock.patch.object(ours_data, "_warnings", WarningCache()), \
            unittest.mock.patch.object(theirs_data, "warning_cache", type(theirs_data.warning_cache)()):  # fmt: skip
        ours, theirs = both(program, r"batch_size")
    assert ours == theirs and ours.error is None and ours.warnings == []  # the last batch is not looked into
    assert seen["fulmen keys"] == seen["lightning.pytorch keys"] and seen["fulmen keys"][:2] == ["loss", "loss_step"]
    assert seen["fulmen"]["end"] == seen["lightning.pytorch"]["end"] == 1.0


@pytest.mark.parametrize("root", ["fulmen", pytest.param("lightning.pytorch", marks=oracle.parity)])
def test_a_logged_key_read_by_lightnings_name(root, tmp_path):
    """``trainer._results["<hook>.<name>[.<dataloader_idx>]"]``, with the epoch accumulation (``value``) and the
    batch sizes it is weighted by (``cumulated_batch_size``), as tests and callbacks written for Lightning read it."""
    import importlib

    if root != "fulmen":
        oracle.lightning()
    pl = importlib.import_module(root)
    BoringModel = importlib.import_module(f"{root}.demos.boring_classes").BoringModel
    seen = {}

    class Model(BoringModel):
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            out = super().validation_step(batch, batch_idx)
            self.log("val_loss", out["x"], batch_size=5)
            return out

        def on_train_epoch_end(self):
            self.log("epoch_end_value", 3.0)
            seen["train"] = float(self.trainer._results["on_train_epoch_end.epoch_end_value"].value)

        def on_validation_epoch_end(self):
            results = self.trainer._results
            seen["sizes"] = [int(results[f"validation_step.val_loss.{i}"].cumulated_batch_size) for i in (0, 1)]

        def val_dataloader(self):
            return [super().val_dataloader(), super().val_dataloader()]

    trainer = pl.Trainer(default_root_dir=tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1,
                         logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, num_sanity_val_steps=0)  # fmt: skip
    trainer.fit(Model())
    assert seen == {"sizes": [5, 5], "train": 3.0}

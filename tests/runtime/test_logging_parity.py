"""What ``self.log`` produces, against lightning==2.6.6: the logger calls (names, values, steps, ``epoch``),
``callback_metrics`` keys and the per-dataloader results of ``test``."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import fulmen
import fulmen.demos.boring_classes
from tests.parity import oracle
from tests.parity.oracle import parity

pytestmark = parity


def _model(base: Any, demos: Any, loaders: int) -> Any:
    class Model(demos.BoringModel):
        def on_train_start(self):
            self.log("started", 123.0)  # an epoch value of the first epoch

        def training_step(self, batch, batch_idx):
            out = super().training_step(batch, batch_idx)
            self.log("a", out["loss"].detach() * 0 + batch_idx, on_step=True, on_epoch=True)
            self.log("best", float(batch_idx), on_step=False, on_epoch=True, reduce_fx=max)
            return out

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("b", float(batch_idx + dataloader_idx), on_step=True, on_epoch=True)
            self.log("val_steps", float(batch_idx), on_step=True, on_epoch=False)

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("t", float(batch_idx), on_step=True, on_epoch=True)
            self.log(f"only_{dataloader_idx}", 10.0 * (dataloader_idx + 1), add_dataloader_idx=False)

        def val_dataloader(self):
            return [DataLoader(demos.RandomDataset(32, 6)) for _ in range(loaders)]

        test_dataloader = val_dataloader

    return Model()


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, float], int]] = []


def _run(base: Any, demos: Any, loaders: int, tmp_path) -> dict[str, Any]:
    recorder = _Recorder()

    class Logger(base.loggers.CSVLogger):
        def log_metrics(self, metrics, step=None):
            recorder.calls.append(({k: round(float(v), 5) for k, v in metrics.items()}, step))

    trainer = base.Trainer(max_epochs=2, limit_train_batches=3, limit_val_batches=2, limit_test_batches=2,
                           log_every_n_steps=1, num_sanity_val_steps=0, logger=Logger(tmp_path),
                           enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    model = _model(base, demos, loaders)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model)
        after_fit = sorted(trainer.callback_metrics)
        logged_are_tensors = all(isinstance(v, torch.Tensor) for v in trainer.logged_metrics.values())
        trainer.validate(model, verbose=False)  # its step values count from 0 again (not on from fit's)
        results = trainer.test(model, verbose=False)
    return {"calls": recorder.calls, "callback_metrics": after_fit, "logged_tensors": logged_are_tensors,
            "test": [{k: round(float(v), 5) for k, v in r.items()} for r in results]}  # fmt: skip


@pytest.mark.parametrize("loaders", [1, 2])
def test_logging_matches_lightning(tmp_path, loaders):
    ours = _run(fulmen, fulmen.demos.boring_classes, loaders, tmp_path / "fulmen")
    lightning = oracle.lightning()
    theirs = _run(lightning, oracle.lightning("lightning.pytorch.demos.boring_classes"), loaders, tmp_path / "l")
    assert ours["callback_metrics"] == theirs["callback_metrics"]
    assert ours["test"] == theirs["test"]
    assert ours["logged_tensors"] and theirs["logged_tensors"]
    assert ours["calls"] == theirs["calls"]


def _same_name_in_several_hooks(base: Any, demos: Any, tmp_path) -> dict[str, Any]:
    """One name logged from training_step, on_train_batch_end, on_train_epoch_end and validation_step: each
    hook's value is kept apart, and where several have one the later-registered replaces the earlier."""
    recorder = _Recorder()

    class Logger(base.loggers.CSVLogger):
        def log_metrics(self, metrics, step=None):
            recorder.calls.append(({k: round(float(v), 5) for k, v in metrics.items()}, step))

    class Model(demos.BoringModel):
        def training_step(self, batch, batch_idx):
            out = super().training_step(batch, batch_idx)
            self.log("x", 1.0 + batch_idx, on_epoch=True, prog_bar=True)
            self.log("shared", 100.0, prog_bar=True)
            return out

        def on_train_batch_end(self, *args):
            self.log("x", 10.0, on_epoch=True)

        def on_train_epoch_end(self):
            self.log("shared", 111.0 + self.current_epoch, prog_bar=True)

        def validation_step(self, batch, batch_idx):
            self.log("x", 5.0)

    seen = []

    class Watch(base.Callback):
        def on_train_batch_end(self, trainer, *args):
            seen.append({k: round(float(v), 5) for k, v in trainer.callback_metrics.items()})

    trainer = base.Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=1, log_every_n_steps=1,
                           num_sanity_val_steps=0, logger=Logger(tmp_path), callbacks=[Watch()],
                           enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Model())
    return {"calls": recorder.calls, "seen": seen,
            "callback": {k: round(float(v), 5) for k, v in trainer.callback_metrics.items()},
            "pbar": {k: round(float(v), 5) for k, v in trainer.progress_bar_metrics.items()}}  # fmt: skip


def test_one_name_logged_from_several_hooks_as_lightning(tmp_path):
    ours = _same_name_in_several_hooks(fulmen, fulmen.demos.boring_classes, tmp_path / "fulmen")
    lightning = oracle.lightning()
    theirs = _same_name_in_several_hooks(
        lightning, oracle.lightning("lightning.pytorch.demos.boring_classes"), tmp_path / "l"
    )
    assert ours["pbar"]["shared"] == 112.0  # the epoch end's value replaces training_step's
    assert ours == theirs


def _logged_dtypes(base: Any, demos: Any, value: Any) -> tuple[dict[str, Any], int]:
    class Model(demos.BoringModel):
        def training_step(self, batch, batch_idx):
            self.log("v", value, prog_bar=True, on_epoch=True)
            return super().training_step(batch, batch_idx)

    trainer = base.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0, logger=False,
                           enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=False)  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(Model())
    floating = sum("floating" in str(w.message) for w in caught)
    return {k: (v.dtype, float(v)) for k, v in trainer.callback_metrics.items()}, floating


@pytest.mark.parametrize(
    "value",
    [
        True, torch.tensor(True), torch.tensor(3, dtype=torch.int32), torch.tensor(0.5, dtype=torch.bfloat16),
        torch.tensor(0.25, dtype=torch.float64),
    ],
    ids=["bool", "bool-tensor", "int32", "bfloat16", "float64"],
)
def test_logged_values_are_floats_of_the_dtype_lightning_gives(value, monkeypatch):
    """Integers and booleans (warned about when tensors) and half floats become the default dtype; float64
    stays: step, epoch and progress-bar values read the same as under Lightning."""
    from fulmen.runtime import results
    from fulmen.utilities.rank_zero import WarningCache

    monkeypatch.setattr(results, "_WARNINGS", WarningCache())  # warned once per process: not by an earlier test
    ours, warned = _logged_dtypes(fulmen, fulmen.demos.boring_classes, value)
    theirs, _ = _logged_dtypes(oracle.lightning(), oracle.lightning("lightning.pytorch.demos.boring_classes"), value)
    assert ours == theirs
    assert warned == (isinstance(value, torch.Tensor) and not value.is_floating_point())

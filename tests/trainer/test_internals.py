"""Lightning's private trainer objects that libraries drive (``fulmen/trainer/internals.py``), compared with
Lightning 2.6.6: a callback restoring another checkpoint in the middle of a fit through
``trainer._checkpoint_connector`` (what finetuning-scheduler does at each phase), the logged keys' records in
``trainer._results``, the callback order of ``trainer._callback_connector``, and ``_AcceleratorConnector`` built
from device arguments."""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path
from typing import Any

import torch

import fulmen
from tests.parity import oracle
from tests.parity.oracle import parity

_QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False)


def _restore_mid_fit(pl: Any, root: Path) -> dict[str, Any]:
    """At the start of epoch 2 a callback puts back the weights and optimizer state of the checkpoint written at
    the end of epoch 0, step by step, as finetuning-scheduler restores its best checkpoint."""
    boring = importlib.import_module(f"{pl.__name__}.demos.boring_classes")
    seen: dict[str, Any] = {}

    class Restore(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            if trainer.current_epoch != 2:
                return
            connector = trainer._checkpoint_connector
            connector.resume_start(checkpoint_path=str(root / "epoch0.ckpt"))
            seen["loaded keys"] = sorted(k for k in connector._loaded_checkpoint if k != "pytorch-lightning_version")
            connector.restore_model()
            connector.restore_optimizers_and_schedulers()
            connector.resume_end()
            seen["released"] = connector._loaded_checkpoint == {}
            seen["ckpt_path"] = Path(trainer.ckpt_path).name

        def on_train_epoch_end(self, trainer, pl_module):
            if trainer.current_epoch == 0:
                trainer.save_checkpoint(root / "epoch0.ckpt")

    pl.seed_everything(3)
    model = boring.BoringModel()
    trainer = pl.Trainer(default_root_dir=root, max_epochs=3, limit_train_batches=2, limit_val_batches=0,
                         callbacks=[Restore()], enable_checkpointing=False, **_QUIET)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model)
    seen["weights"] = [p.detach().clone() for p in model.parameters()]
    seen["global_step"] = trainer.global_step
    return seen


@parity
def test_a_callback_restores_another_checkpoint_mid_fit_through_the_checkpoint_connector(tmp_path):
    ours = _restore_mid_fit(fulmen, tmp_path / "fulmen")
    theirs = _restore_mid_fit(oracle.lightning(), tmp_path / "lightning")
    weights_ours, weights_theirs = ours.pop("weights"), theirs.pop("weights")
    assert ours == theirs
    assert ours["released"] and ours["ckpt_path"] == "epoch0.ckpt"
    for a, b in zip(weights_ours, weights_theirs):
        torch.testing.assert_close(a, b)


def _records(pl: Any) -> tuple[Any, ...]:
    boring = importlib.import_module(f"{pl.__name__}.demos.boring_classes")
    seen: list[Any] = []

    class Model(boring.BoringModel):
        def training_step(self, batch, batch_idx):
            out = super().training_step(batch, batch_idx)
            self.log("synced", out["loss"], sync_dist=True)
            self.log("plain", out["loss"])
            return out

    class Reader(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            for record in trainer._results.result_metrics:
                seen.append((record.meta.name, record.meta.sync.should, record.is_tensor))

    finder = pl.callbacks.LearningRateFinder()
    others = [pl.callbacks.ModelCheckpoint(), Reader(), finder]
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, callbacks=[Reader()],
                         enable_checkpointing=False, **_QUIET)  # fmt: skip
    order = [type(cb).__name__ for cb in trainer._callback_connector._reorder_callbacks(others)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Model())
    return sorted(set(seen)), order, trainer._results


@parity
def test_the_results_records_and_the_callback_order_are_lightnings():
    ours, theirs = _records(fulmen), _records(oracle.lightning())
    assert ours[0] == theirs[0] == [("plain", False, True), ("synced", False, True)]
    assert ours[1] == theirs[1] == ["LearningRateFinder", "Reader", "ModelCheckpoint"]
    assert ours[2] is None and theirs[2] is None  # outside a run


def _connector_flags(pl: Any, **flags: Any) -> tuple[Any, ...]:
    module = importlib.import_module(f"{pl.__name__}.trainer.connectors.accelerator_connector")
    connector = module._AcceleratorConnector(**flags)
    strategy_flag = connector._strategy_flag
    if not isinstance(strategy_flag, str):
        strategy_flag = type(strategy_flag).__name__
    return (strategy_flag, connector._accelerator_flag, connector._devices_flag, connector._precision_flag,
            connector._parallel_devices, connector.is_distributed)  # fmt: skip


@parity
def test_an_accelerator_connector_built_from_device_arguments_resolves_them_as_lightnings():
    for flags in ({}, {"devices": 1}, {"accelerator": "cpu", "devices": 2}, {"strategy": "ddp_spawn", "devices": 2},
                  {"accelerator": "cpu", "precision": "bf16-mixed"}):  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert _connector_flags(fulmen, **flags) == _connector_flags(oracle.lightning(), **flags), flags

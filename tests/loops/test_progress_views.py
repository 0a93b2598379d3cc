"""Lightning's loop state as views of fulmen's: the progress trackers, batch indices and flags that callbacks and
libraries read from ``trainer.fit_loop``, compared with Lightning 2.6.6 hook by hook."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import torch
from torch.utils.data import DataLoader

from tests.parity import oracle


def _record(name: str) -> list[Any]:
    if name != "fulmen":
        oracle.lightning()
    pl = importlib.import_module(name)
    boring = importlib.import_module(name + ".demos.boring_classes")
    seen: list[Any] = []

    def read(where: str, trainer: Any) -> None:
        fit = trainer.fit_loop
        epoch, batch = fit.epoch_progress, fit.epoch_loop.batch_progress
        seen.append((
            where,
            (epoch.current.ready, epoch.current.started, epoch.current.processed, epoch.current.completed,
             epoch.total.completed),
            (batch.current.ready, batch.current.started, batch.current.processed, batch.current.completed),
            (batch.total.ready, batch.total.completed, batch.is_last_batch),
            fit.epoch_loop.batch_idx, fit.epoch_loop.total_batch_idx, fit.max_batches,
        ))  # fmt: skip

    class Reader(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            read("epoch_start", trainer)

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            read("batch_start", trainer)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            read("batch_end", trainer)

        def on_validation_start(self, trainer, pl_module):
            if not trainer.sanity_checking:
                read("validation_start", trainer)

        def on_train_epoch_end(self, trainer, pl_module):
            read("epoch_end", trainer)

    torch.manual_seed(0)
    trainer = pl.Trainer(
        max_epochs=2, limit_train_batches=3, limit_val_batches=1, val_check_interval=2, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, callbacks=[Reader()],
    )  # fmt: skip
    loader = DataLoader(boring.RandomDataset(32, 12), batch_size=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(boring.BoringModel(), loader, DataLoader(boring.RandomDataset(32, 4), batch_size=2))
    read("after_fit", trainer)
    seen.append(("automatic_optimization", type(trainer.fit_loop.epoch_loop.automatic_optimization).__name__ != ""))
    return seen


@oracle.parity
def test_progress_trackers_and_batch_indices_read_as_in_lightning():
    theirs, ours = _record("lightning.pytorch"), _record("fulmen")
    different = [(a, b) for a, b in zip(theirs, ours) if a != b]
    assert len(theirs) == len(ours) and different == [], different[:4]


def test_max_batches_can_be_set_by_a_callback():
    import fulmen
    from fulmen.demos.boring_classes import BoringModel, RandomDataset

    taken: list[int] = []

    class Cut(fulmen.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            trainer.fit_loop.max_batches = 2

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            taken.append(batch_idx)

    trainer = fulmen.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, callbacks=[Cut()])  # fmt: skip
    trainer.fit(BoringModel(), DataLoader(RandomDataset(32, 12), batch_size=2))
    assert taken == [0, 1] and trainer.num_training_batches == 2


def _written(name: str) -> list[Any]:
    """A callback that sets the trackers (as libraries do to move a run's step and batch counters, and to reset
    them before fitting the same trainer again), and what the run then counts."""
    if name != "fulmen":
        oracle.lightning()
    pl = importlib.import_module(name)
    boring = importlib.import_module(name + ".demos.boring_classes")
    seen: list[Any] = []

    class Writer(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            epoch_loop = trainer.fit_loop.epoch_loop
            if trainer.current_epoch == 1:
                epoch_loop.automatic_optimization.optim_progress.optimizer.step.total.completed = 100
                epoch_loop.batch_progress.total.ready = 51  # total_batch_idx 50
                epoch_loop.batch_progress.total.completed = 50
            seen.append(("epoch start", trainer.current_epoch, trainer.global_step, trainer.fit_loop.total_batch_idx))

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append(("batch end", trainer.global_step, trainer.fit_loop.total_batch_idx, trainer.fit_loop.batch_idx))

    args = dict(limit_train_batches=2, limit_val_batches=0, logger=False, enable_progress_bar=False,
                enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(max_epochs=3, callbacks=[Writer()], **args)
        trainer.fit(boring.BoringModel())
        fit = trainer.fit_loop
        fit.epoch_progress.reset()
        fit.epoch_loop.batch_progress.reset()
        fit.epoch_loop.automatic_optimization.optim_progress.optimizer.step.total.completed = 0
        seen.append(("reset", trainer.current_epoch, trainer.global_step, fit.epoch_loop.batch_progress.total.ready))
        trainer.fit(boring.BoringModel())
    seen.append(("end", trainer.current_epoch, trainer.global_step))
    return seen


@oracle.parity
def test_writing_the_trackers_moves_the_runs_counters_as_in_lightning():
    ours, theirs = _written("fulmen"), _written("lightning.pytorch")
    assert ("epoch start", 1, 100, 50) in theirs
    assert ours == theirs


def _evaluation_counts(name: str) -> list[Any]:
    """``batch_progress`` of the evaluation and prediction loops (the fit's validation, ``validate``, ``test``,
    ``predict``), over two dataloaders, read in each batch hook."""
    if name != "fulmen":
        oracle.lightning()
    pl = importlib.import_module(name)
    boring = importlib.import_module(name + ".demos.boring_classes")
    seen: list[Any] = []

    def read(where: str, loop: Any) -> None:
        bp = loop.batch_progress
        counters = ("ready", "started", "processed", "completed")
        seen.append((where, tuple(getattr(bp.current, c) for c in counters),
                     tuple(getattr(bp.total, c) for c in counters), bp.is_last_batch))  # fmt: skip

    def loaders() -> list[DataLoader]:
        return [DataLoader(boring.RandomDataset(32, 6), batch_size=2), DataLoader(boring.RandomDataset(32, 4), batch_size=2)]

    class Model(boring.BoringModel):
        def val_dataloader(self):
            return loaders()

        test_dataloader = predict_dataloader = val_dataloader

        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            return super().validation_step(batch, batch_idx)

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            return super().test_step(batch, batch_idx)

        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return super().predict_step(batch, batch_idx)

    def val_loop(trainer: Any) -> Any:
        return trainer.fit_loop.epoch_loop.val_loop if trainer.state.fn == "fit" else trainer.validate_loop

    class Reader(pl.Callback):
        def on_validation_start(self, trainer, pl_module):
            read("validation start", val_loop(trainer))

        def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
            read(f"validation batch start {dataloader_idx}.{batch_idx}", val_loop(trainer))

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            read(f"validation batch end {dataloader_idx}.{batch_idx}", val_loop(trainer))

        def on_validation_end(self, trainer, pl_module):
            read("validation end", val_loop(trainer))

        def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
            read(f"test batch end {dataloader_idx}.{batch_idx}", trainer.test_loop)

        def on_predict_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
            read(f"predict batch start {dataloader_idx}.{batch_idx}", trainer.predict_loop)

        def on_predict_end(self, trainer, pl_module):
            read("predict end", trainer.predict_loop)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = pl.Trainer(max_epochs=2, limit_train_batches=2, num_sanity_val_steps=1, callbacks=[Reader()],
                             logger=False, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=False)  # fmt: skip
        model = Model()
        trainer.fit(model)
        trainer.validate(model)
        trainer.test(model)
        trainer.predict(model)
    return seen


@oracle.parity
def test_the_evaluation_loops_batch_progress_is_lightnings():
    ours, theirs = _evaluation_counts("fulmen"), _evaluation_counts("lightning.pytorch")
    assert ("validation end", (5, 5, 5, 5), (5, 5, 5, 5), True) in theirs
    assert ours == theirs

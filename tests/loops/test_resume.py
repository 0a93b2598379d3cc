"""Resuming (``loops/resume.py``): the data order a run resumed on another number of processes keeps, and the
counters the hooks of a resumed fit see."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import fulmen
from fulmen.loops.resume import OrderKeepingSampler, data_layout, global_order, keep_order
from tests.parity import oracle
from tests.parity.oracle import parity


def _dataset(n: int) -> TensorDataset:
    return TensorDataset(torch.arange(n))


def _interleaved(sampler_for_rank, replicas: int) -> list[int]:
    shares = []
    for rank in range(replicas):
        sampler = sampler_for_rank(rank)
        sampler.set_epoch(3)
        shares.append(list(sampler))
    return [i for position in zip(*shares) for i in position]


@pytest.mark.parametrize("n", [24, 10, 11])  # even, padded for 4 shares, padded for 2 and 4
@pytest.mark.parametrize(("written", "resumed"), [(2, 1), (4, 2), (2, 4), (4, 1)])
@pytest.mark.parametrize("drop_last", [False, True])
def test_every_epoch_keeps_the_global_order_of_the_writing_run(n, written, resumed, drop_last):
    dataset = _dataset(n)
    expected = global_order(dataset, written, True, 5, drop_last, epoch=3)
    got = _interleaved(lambda r: OrderKeepingSampler(dataset, resumed, r, True, 5, drop_last, written), resumed)
    assert got[: len(expected)] == expected
    assert len(got) - len(expected) < resumed  # at most the padding that shares it out evenly
    per_rank = len(OrderKeepingSampler(dataset, resumed, 0, True, 5, drop_last, written))
    assert per_rank * resumed == len(got)


def test_the_writing_runs_order_is_its_distributed_samplers():
    dataset = _dataset(11)
    expected = _interleaved(lambda r: DistributedSampler(dataset, 2, r, shuffle=True, seed=5), 2)
    assert global_order(dataset, 2, True, 5, False, epoch=3) == expected


def test_a_plain_process_resuming_a_distributed_run_keeps_its_order():
    dataset = _dataset(11)
    written = DataLoader(dataset, batch_size=2, sampler=DistributedSampler(dataset, 2, 0, shuffle=True, seed=5))
    saved = data_layout(written)
    assert saved is not None
    plain = DataLoader(dataset, batch_size=4, shuffle=True)
    kept = keep_order(plain, saved)
    assert isinstance(kept.sampler, OrderKeepingSampler) and kept.batch_size == 4
    assert data_layout(kept)["order_replicas"] == 2  # a checkpoint of the resumed run keeps saying so
    assert keep_order(kept, data_layout(kept)) is kept
    assert keep_order(plain, None) is plain  # no checkpoint: its own order
    assert keep_order(DataLoader(_dataset(12), batch_size=4), saved).sampler.__class__ is not OrderKeepingSampler


def _counters_seen_on_resume(pl: Any, root: Path, case: str) -> list[tuple[str, int, int]]:
    from importlib import import_module

    boring = import_module(f"{pl.__name__}.demos.boring_classes").BoringModel
    val = 2 if case == "epoch end, validation" else 0
    every = 3 if case == "mid-epoch" else None
    args = dict(default_root_dir=root, max_epochs=1, limit_train_batches=4, limit_val_batches=val, logger=False,
                num_sanity_val_steps=0, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=root, save_last=True, every_n_train_steps=every)
    pl.Trainer(callbacks=[checkpoint], max_steps=3 if every else -1, **args).fit(boring())
    seen: list[tuple[str, int, int]] = []

    class Model(boring):
        def _note(self, hook):
            seen.append((hook, self.trainer.current_epoch, self.trainer.global_step))

        def on_fit_start(self):
            self._note("on_fit_start")

        def on_train_start(self):
            self._note("on_train_start")

        def on_train_epoch_start(self):
            self._note("on_train_epoch_start")

        def on_train_end(self):
            self._note("on_train_end")

    args["max_epochs"] = 2
    pl.Trainer(**args).fit(Model(), ckpt_path=str(root / "last.ckpt"))
    return seen


def _hooks_of_a_resumed_run(pl: Any, root: Path, written: str) -> list[tuple[Any, ...]]:
    """A first run stopped by EarlyStopping, its checkpoint written in the validation after an epoch's last batch
    (``written="after last batch"``) or every 5 steps (``"mid-epoch"``: the last at step 10, inside the third
    epoch); then a fit resumed from its last file,
    with the default sanity check: the hooks it calls, with epoch and step."""
    from importlib import import_module

    boring = import_module(f"{pl.__name__}.demos.boring_classes").BoringModel

    class Model(boring):
        def validation_step(self, batch, batch_idx):
            self.log("score", float(self.current_epoch >= 1))  # improves once, then stalls

    seen: list[tuple[Any, ...]] = []

    class Recorder(pl.Callback):
        def on_sanity_check_start(self, trainer, pl_module):
            seen.append(("on_sanity_check_start",))

        def on_train_epoch_start(self, trainer, pl_module):
            seen.append(("on_train_epoch_start", trainer.current_epoch, trainer.global_step))

        def on_train_epoch_end(self, trainer, pl_module):
            seen.append(("on_train_epoch_end", trainer.current_epoch, trainer.global_step))

    args = dict(limit_train_batches=4, limit_val_batches=1, logger=False, enable_progress_bar=False,
                enable_model_summary=False)  # fmt: skip
    every = {"every_n_train_steps": 5} if written == "mid-epoch" else {"save_on_train_epoch_end": False}
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=root, save_top_k=-1, **every)
    stopper = pl.callbacks.EarlyStopping("score", patience=0, mode="max", check_on_train_epoch_end=False)
    first = pl.Trainer(default_root_dir=root, callbacks=[checkpoint, stopper], max_epochs=10, **args)
    first.fit(Model())
    last = max(root.glob("*.ckpt"), key=lambda p: int(p.stem.split("step=")[1]))
    seen.append(("first run stopped at", first.current_epoch, first.global_step, last.name))
    resumed = pl.Trainer(default_root_dir=root, callbacks=[Recorder()], max_epochs=4, enable_checkpointing=False,
                         **args)  # fmt: skip
    resumed.fit(Model(), ckpt_path=str(last))
    seen.append(("resumed run ended at", resumed.current_epoch, resumed.global_step))
    return seen


@parity
@pytest.mark.parametrize("written", ["after last batch", "mid-epoch"])
def test_a_run_resumed_after_early_stopping_trains_on_as_in_lightning(tmp_path, written):
    """The stop decision is not part of the resumed state (the resumed fit trains to its own limits); a run that
    goes on inside an epoch has no sanity check; an epoch whose last batch ran before the checkpoint only ends
    (no on_train_epoch_start). From the middle of an epoch, on_train_epoch_start runs again (deliberate)."""
    ours = _hooks_of_a_resumed_run(fulmen, tmp_path / "fulmen", written)
    theirs = _hooks_of_a_resumed_run(oracle.lightning(), tmp_path / "lightning", written)
    if written == "mid-epoch":
        assert ours.pop(1) == ("on_train_epoch_start", 2, 10)
    assert ours == theirs


@parity
@pytest.mark.parametrize("case", ["epoch end", "epoch end, validation", "mid-epoch"])
def test_hooks_of_a_resumed_fit_see_lightnings_epoch_and_step(tmp_path, case):
    """on_train_start of a run resumed from an epoch's end already sees the next epoch, as under Lightning. From
    the middle of an epoch, that epoch's on_train_epoch_start runs again (at the step it was written), which
    Lightning skips: callbacks that set the epoch up there (without saving it in their state) stay right."""
    ours = _counters_seen_on_resume(fulmen, tmp_path / "fulmen", case)
    theirs = _counters_seen_on_resume(oracle.lightning(), tmp_path / "lightning", case)
    if case == "mid-epoch":
        assert ours.pop(2) == ("on_train_epoch_start", 0, 3)
    assert ours == theirs

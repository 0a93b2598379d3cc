"""``runtime/data.py``: the advice given when a stage loads its dataloaders, compared with Lightning's on the
same program (its words, classes, and how often it is said), and overfit_batches reading the data in order."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from tests.parity import oracle
from tests.parity.recorded import boring_model, both

ADVICE = r"workers|shuffling|IterableDataset|Total length|pin_memory"


def _loader(n=8, **kwargs):
    return DataLoader(torch.randn(n, 32), batch_size=2, **kwargs)


def _trainer(pl, tmp_path, **flags):
    kwargs = dict(default_root_dir=tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1,
                  logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    return pl.Trainer(**{**kwargs, **flags})


def _model(pl):
    class Model(boring_model(pl)):  # takes several evaluation loaders
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            return super().validation_step(batch, batch_idx)

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            return super().test_step(batch, batch_idx)

    return Model()


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.randn(8, 32))

    def __len__(self):
        return 8


@oracle.parity
@pytest.mark.parametrize("cpus", [2, 8])
@pytest.mark.parametrize("stage", ["fit", "test", "predict"])
def test_the_worker_advice_is_lightnings(tmp_path, monkeypatch, cpus, stage):
    """Few workers (for the CPUs this process may use), per loader and per load; spawned workers that are not
    persistent; pinned persistent workers that are reloaded."""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cpus)), raising=False)

    def program(pl):
        trainer = _trainer(pl, tmp_path, max_epochs=2, reload_dataloaders_every_n_epochs=1)
        if stage == "fit":
            trainer.fit(_model(pl), _loader(), [_loader(), _loader(num_workers=2)])
        else:
            getattr(trainer, stage)(_model(pl), [_loader(), _loader()])

    ours, theirs = both(program, ADVICE)
    assert ours == theirs and ours.error is None
    assert bool(ours.warnings) == (cpus == 8)
    if cpus == 8:
        name = "train" if stage == "fit" else stage
        assert ("PossibleUserWarning", (
            f"The '{name}_dataloader' does not have many workers which may be a bottleneck. Consider increasing the "
            "value of the `num_workers` argument` to `num_workers=7` in the `DataLoader` to improve performance."
        )) in ours.warnings  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("stage", ["fit", "validate", "test", "predict"])
def test_shuffled_evaluation_loaders_are_pointed_out(tmp_path, stage):
    def program(pl):
        trainer = _trainer(pl, tmp_path)
        shuffled = _loader(shuffle=True)
        if stage == "fit":  # the training loader shuffles without a word
            trainer.fit(_model(pl), shuffled, [_loader(shuffle=True), _loader()])
        else:
            getattr(trainer, stage)(_model(pl), shuffled)

    ours, theirs = both(program, ADVICE)
    assert ours == theirs and ours.error is None
    prefix = {"fit": "val", "validate": "val"}.get(stage, stage)
    assert ours.warnings == [("PossibleUserWarning", (
        f"Your `{prefix}_dataloader`'s sampler has shuffling enabled, it is strongly recommended that you turn "
        "shuffling off for val/test dataloaders."
    ))]  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("train", ["shuffled", "in order", "stream", "list"])
def test_overfitting_turns_shuffling_off_as_lightning_does(tmp_path, train):
    seen = {}

    def program(pl):
        class Model(boring_model(pl)):
            def training_step(self, batch, batch_idx):
                seen.setdefault(pl.__name__, []).append(("train", batch[0] if train == "list" else batch))
                return super().training_step(batch[0] if train == "list" else batch, batch_idx)

            def validation_step(self, batch, batch_idx):
                seen.setdefault(pl.__name__, []).append(("val", batch))

        data = torch.arange(8 * 32, dtype=torch.float32).reshape(8, 32)
        loader = {
            "shuffled": DataLoader(data, batch_size=2, shuffle=True),
            "in order": DataLoader(data, batch_size=2),
            "stream": DataLoader(_Stream(), batch_size=2),
            "list": [DataLoader(data, batch_size=2, shuffle=True), DataLoader(data, batch_size=2)],
        }[train]
        torch.manual_seed(0)
        _trainer(pl, tmp_path, overfit_batches=2, max_epochs=2, num_sanity_val_steps=0).fit(
            Model(), loader, DataLoader(data + 1000, batch_size=2, shuffle=True)
        )

    ours, theirs = both(program, r"overfit")
    assert ours == theirs and ours.error is None
    said = [message for _, message in ours.warnings]
    assert (
        "You requested to overfit but enabled val dataloader shuffling. We are turning off the val dataloader "
        "shuffling for you."
    ) in said
    assert any("train dataloader shuffling" in message for message in said) == (train != "in order")
    for (stage, a), (stage_b, b) in zip(seen["fulmen"], seen["lightning.pytorch"], strict=True):
        assert stage == stage_b and (train == "stream" or torch.equal(a, b))  # the same batches, in order


@oracle.parity
@pytest.mark.parametrize("stage", ["fit", "test", "predict"])
def test_lengths_that_may_mislead_are_pointed_out(tmp_path, stage):
    """An IterableDataset with a length (an estimate), data of length zero."""

    def program(pl):
        trainer = _trainer(pl, tmp_path)
        if stage == "fit":
            trainer.fit(_model(pl), DataLoader(_Stream(), batch_size=2), _loader(0))
        else:
            getattr(trainer, stage)(_model(pl), [DataLoader(_Stream(), batch_size=2), _loader(0)])

    ours, theirs = both(program, ADVICE)
    assert ours == theirs and ours.error is None
    assert [category for category, _ in ours.warnings] == ["UserWarning", "UserWarning"]


@oracle.parity
def test_an_empty_training_loader_is_pointed_out(tmp_path):
    def program(pl):
        _trainer(pl, tmp_path).fit(boring_model(pl)(), _loader(0))

    ours, theirs = both(program, ADVICE)
    assert ours == theirs and ours.error is None
    assert [message.split(" across")[0] for _, message in ours.warnings] == [
        "Total length of `DataLoader`", "Total length of `CombinedLoader`"
    ]

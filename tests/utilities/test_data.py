"""preload and InMemoryDataLoader: the same batches as DataLoader(TensorDataset), shuffles that resume
exactly; the data-loading advice the trainer gives."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

import fulmen
from fulmen.callbacks import ModelCheckpoint
from fulmen.utilities.in_memory import InMemoryDataLoader, preload

X = torch.arange(50 * 3, dtype=torch.float32).reshape(50, 3)
Y = torch.arange(50) % 4


class Samples(Dataset):
    def __len__(self):
        return 50

    def __getitem__(self, i):
        return X[i], int(Y[i])


def test_preload_stacks_a_map_style_dataset_once():
    data = preload(Samples(), chunk_size=16)
    assert isinstance(data, TensorDataset)
    torch.testing.assert_close(data.tensors[0], X)
    torch.testing.assert_close(data.tensors[1], Y)
    again = preload(TensorDataset(X, Y), device="cpu")  # a TensorDataset is taken as it is, then moved
    assert all(torch.equal(a, b) for a, b in zip(again.tensors, (X, Y)))

    class Stream(IterableDataset):
        def __iter__(self):
            yield X[0]

    with pytest.raises(TypeError, match="map-style"):
        preload(Stream())


@pytest.mark.parametrize("drop_last", [False, True])
def test_without_shuffling_the_batches_are_dataloaders(drop_last):
    ours = list(InMemoryDataLoader(TensorDataset(X, Y), batch_size=8, drop_last=drop_last))
    theirs = list(DataLoader(TensorDataset(X, Y), batch_size=8, drop_last=drop_last))
    assert len(ours) == len(theirs) == len(InMemoryDataLoader(X, batch_size=8, drop_last=drop_last))
    for a, b in zip(ours, theirs):
        assert isinstance(a, list) and len(a) == 2
        torch.testing.assert_close(a, b)


def test_shuffling_depends_on_the_seed_and_the_epoch_only():
    loader = InMemoryDataLoader((X, Y), batch_size=8, shuffle=True, seed=7)
    epoch0 = torch.cat([b[1] for b in loader])
    assert sorted(torch.cat([b[0][:, 0] for b in loader]).tolist()) == X[:, 0].tolist()  # a permutation
    assert torch.equal(epoch0, torch.cat([b[1] for b in loader]))  # same epoch: same order
    loader.sampler.set_epoch(1)
    assert not torch.equal(epoch0, torch.cat([b[1] for b in loader]))
    again = InMemoryDataLoader((X, Y), batch_size=8, shuffle=True, seed=7)
    again.sampler.set_epoch(1)
    assert torch.equal(torch.cat([b[1] for b in loader]), torch.cat([b[1] for b in again]))
    fulmen.seed_everything(3, verbose=False)
    a = InMemoryDataLoader(X, shuffle=True).sampler.seed
    fulmen.seed_everything(3, verbose=False)
    assert InMemoryDataLoader(X, shuffle=True).sampler.seed == a  # seed=None: from torch's global RNG


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="preload"):
        InMemoryDataLoader(Samples())
    with pytest.raises(ValueError, match="first dimensions differ"):
        InMemoryDataLoader((X, Y[:10]))
    with pytest.raises(ValueError, match="batch_size=0"):
        InMemoryDataLoader(X, batch_size=0)


class Model(fulmen.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Linear(3, 4)
        self.seen: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append(y)
        return nn.functional.cross_entropy(self.net(x / 100), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5, momentum=0.9)


def test_a_shuffled_run_resumes_mid_epoch_exactly(tmp_path):
    def loader():
        return InMemoryDataLoader((X, Y), batch_size=8, shuffle=True, seed=11)

    def trainer(**kwargs):
        return fulmen.Trainer(max_epochs=3, logger=False, enable_progress_bar=False, enable_model_summary=False,
                              default_root_dir=tmp_path, **kwargs)  # fmt: skip

    full = Model()
    trainer(enable_checkpointing=False).fit(full, loader())
    epochs = [torch.cat(full.seen[i * 7 : (i + 1) * 7]) for i in range(3)]
    assert not torch.equal(epochs[0], epochs[1])  # the fit loop moved the order on each epoch

    every_10 = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=10, save_top_k=-1)
    trainer(callbacks=[every_10]).fit(Model(), loader())
    resumed = Model()
    trainer(enable_checkpointing=False).fit(resumed, loader(), ckpt_path=tmp_path / "epoch=1-step=10.ckpt")
    assert torch.equal(torch.cat(resumed.seen), torch.cat(full.seen[10:]))
    for p, q in zip(resumed.parameters(), full.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_data_loading_advice(monkeypatch):
    """Lightning's advice, in its words (tests/runtime/test_data_advice.py compares whole runs with it)."""
    trainer = fulmen.Trainer(max_epochs=3, logger=False, reload_dataloaders_every_n_epochs=1)
    data = trainer.run_context.data
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data._check_workers(DataLoader(TensorDataset(X, Y)), "train")
        data._check_workers(DataLoader(TensorDataset(X, Y), num_workers=2), "train")
        data._check_workers(DataLoader(TensorDataset(X, Y), num_workers=2, multiprocessing_context="spawn"), "val")
        data._check_workers(DataLoader(TensorDataset(X, Y), num_workers=2, persistent_workers=True,
                                       pin_memory=True), "test")  # fmt: skip
        data._check_workers(InMemoryDataLoader(X), "train")
    messages = [str(w.message) for w in caught]
    assert len(messages) == 3, messages
    assert messages[0].startswith("The 'train_dataloader' does not have many workers") and "num_workers=7" in messages[0]
    assert messages[1] == (
        "Consider setting `persistent_workers=True` in 'val_dataloader' to speed up the dataloader worker initialization."
    )
    assert messages[2].startswith("The combination of `DataLoader(`pin_memory=True`, `persistent_workers=True`)")


class _Strided(torch.utils.data.BatchSampler):
    """A batch sampler with an argument of its own, not kept under its name."""

    def __init__(self, sampler, batch_size, drop_last, every):
        super().__init__(sampler, batch_size, drop_last)
        self._every = every

    def __iter__(self):
        return (batch for i, batch in enumerate(super().__iter__()) if i % self._every == 0)


def test_a_batch_sampler_is_made_again_over_a_share_from_its_recorded_arguments():
    """Made in a ``*_dataloader`` hook (arguments recorded), a batch sampler subclass is made again over each
    process's share with its own arguments; prediction turns ``drop_last`` off. Made elsewhere, one whose
    arguments are not BatchSampler's is refused with what to do."""
    from torch.utils.data import DistributedSampler, SequentialSampler

    from fulmen.utilities.exceptions import MisconfigurationException
    from fulmen.utilities.loader_rebuild import batch_sampler_over, recording_loader_arguments

    share = DistributedSampler(range(12), num_replicas=2, rank=1, shuffle=False)  # 1, 3, 5, 7, 9, 11
    with recording_loader_arguments():
        recorded = _Strided(SequentialSampler(range(12)), 2, drop_last=True, every=2)
    again = batch_sampler_over(recorded, share, predicting=True)
    assert type(again) is _Strided and again.sampler is share and again.drop_last is False
    assert list(again) == [[1, 3], [9, 11]]
    unrecorded = _Strided(SequentialSampler(range(12)), 2, drop_last=True, every=2)
    with pytest.raises(TypeError, match=r"_Strided\(sampler, batch_size=\.\.\., drop_last=\.\.\.\)`, which failed") as err:
        batch_sampler_over(unrecorded, share)
    assert isinstance(err.value, MisconfigurationException) and "every" in str(err.value)

"""Sample seeding: random augmentation in ``__getitem__`` depends on the seed, the epoch and the sample only."""

from __future__ import annotations

import os
import random
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, TensorDataset

import fulmen
from fulmen.callbacks import ModelCheckpoint
from fulmen.demos.boring_classes import BoringModel
from fulmen.utilities.sample_seeds import SampleSeededDataset, sample_seed, sample_seed_in_use, sample_seeded

N, BATCH = 48, 4


class Augmented(Dataset):
    """Each sample gets noise from all three global generators (as torchvision / albumentations draw)."""

    def __init__(self) -> None:
        self.data = torch.randn(N, 32, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        noise = torch.rand(32) + random.random() + float(np.random.rand())
        return self.data[index] + 0.1 * noise, index


class Recording(BoringModel):
    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[tuple[int, int], torch.Tensor] = {}

    def training_step(self, batch, batch_idx):
        x, index = batch
        for row, i in zip(x, index.tolist()):
            self.seen[(self.current_epoch, i)] = row.clone()
        return super().training_step(x, batch_idx)


def _fit(root, workers: int, ckpt_path=None, persistent: bool = False, every: int | None = None) -> Recording:
    fulmen.seed_everything(3)
    model = Recording()
    loader = DataLoader(Augmented(), batch_size=BATCH, shuffle=True, num_workers=workers,
                        persistent_workers=persistent)  # fmt: skip
    callbacks: list[Any] = []
    if every:
        callbacks.append(ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=every, save_top_k=-1))
    trainer = fulmen.Trainer(max_epochs=2, limit_val_batches=0, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=root, callbacks=callbacks,
                             enable_checkpointing=bool(every))  # fmt: skip
    trainer.fit(model, loader, ckpt_path=ckpt_path)
    assert trainer.train_dataloader is not None and type(trainer.train_dataloader.dataset) is Augmented
    return model


def _assert_same(a: dict[Any, torch.Tensor], b: dict[Any, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.slow
def test_the_same_sample_gets_the_same_augmentation_on_any_number_of_workers(tmp_path):
    main = _fit(tmp_path / "a", workers=0)
    workers = _fit(tmp_path / "b", workers=2, persistent=True)
    _assert_same(main.seen, workers.seen)
    assert not torch.equal(main.seen[(0, 5)], main.seen[(1, 5)])  # a new draw every epoch


@pytest.mark.slow
def test_a_run_resumed_mid_epoch_with_worker_processes_ends_with_the_same_weights(tmp_path):
    whole = _fit(tmp_path / "a", workers=2, every=1)
    resumed = _fit(tmp_path / "b", workers=2, ckpt_path=tmp_path / "a" / "ckpt" / "epoch=0-step=7.ckpt")
    for key, value in whole.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key


def test_a_sample_is_augmented_alike_on_any_number_of_processes():
    dataset = Augmented()

    def draws(replicas: int) -> dict[int, torch.Tensor]:
        out = {}
        for rank in range(replicas):
            sampler = DistributedSampler(dataset, num_replicas=replicas, rank=rank, shuffle=True, seed=11)
            sampler.set_epoch(1)
            twin = sample_seeded(DataLoader(dataset, batch_size=BATCH, sampler=sampler), lambda: 1, 11)
            for x, index in twin:
                out.update({i: row for i, row in zip(index.tolist(), x)})
        return out

    _assert_same(draws(1), draws(2))
    _assert_same(draws(1), draws(4))


def test_loading_in_the_main_process_leaves_the_training_generators_alone():
    twin = sample_seeded(DataLoader(Augmented(), batch_size=BATCH), lambda: 0, 0)
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    next(iter(DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=BATCH)))  # a DataLoader draws its base seed
    expected = (torch.rand(3), random.random(), np.random.rand())
    torch.manual_seed(5), random.seed(5), np.random.seed(5)
    next(iter(twin))
    assert torch.equal(torch.rand(3), expected[0]) and random.random() == expected[1]
    assert np.random.rand() == expected[2]


def test_where_sample_seeding_does_not_apply(monkeypatch):
    monkeypatch.setenv("PL_SEED_SAMPLES", "1")  # put back as it was after the test (seed_everything sets it)
    monkeypatch.setenv("PL_GLOBAL_SEED", "0")
    monkeypatch.delenv("PL_GLOBAL_SEED")
    assert sample_seed_in_use() is None  # no seed_everything: nothing to derive from
    fulmen.seed_everything(4)
    assert sample_seed_in_use() == 4
    tensors = DataLoader(TensorDataset(torch.zeros(4, 2)), batch_size=2)
    assert sample_seeded(tensors, lambda: 0, 4) is tensors  # indexing tensors draws nothing
    augmented = DataLoader(Augmented(), batch_size=2)
    assert isinstance(sample_seeded(augmented, lambda: 0, 4).dataset, SampleSeededDataset)
    assert sample_seeded(augmented, lambda: 0, None) is augmented
    fulmen.seed_everything(0, samples=False)
    assert sample_seed_in_use() is None and os.environ["PL_SEED_SAMPLES"] == "0"
    fulmen.seed_everything(0)
    assert "PL_SEED_SAMPLES" not in os.environ  # the default adds nothing to the environment


def test_seeds_differ_by_seed_epoch_and_index():
    seeds = {sample_seed(s, e, i) for s in range(3) for e in range(3) for i in range(100)}
    assert len(seeds) == 900

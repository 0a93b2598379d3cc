"""``PrefetchIterator``: batches with ``is_last``, limits, and a mid-epoch start that loads nothing skipped."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from fulmen.loops.fetchers import PrefetchIterator, fetches_lazily


class Counting(Dataset):
    def __init__(self, n):
        self.n = n
        self.loaded: list[int] = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.loaded.append(i)
        return torch.tensor([i])


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.arange(5).view(5, 1))


def _drain(iterator):
    return [(batch.flatten().tolist(), last) for batch, last in iterator]


def test_a_sized_dataloader_is_read_lazily_with_is_last_on_its_last_batch():
    data = Counting(6)
    loader = DataLoader(data, batch_size=2)
    assert fetches_lazily(loader)
    iterator = PrefetchIterator(loader, float("inf"))
    assert data.loaded == []  # nothing fetched before the loop asks
    assert _drain(iterator) == [([0, 1], False), ([2, 3], False), ([4, 5], True)]
    assert iterator.done


def test_a_limit_ends_the_epoch_early_and_marks_the_last_batch():
    assert _drain(PrefetchIterator(DataLoader(Counting(10), batch_size=2), 2)) == [([0, 1], False), ([2, 3], True)]


def test_unsized_iterables_are_read_one_batch_ahead():
    loader = DataLoader(Stream(), batch_size=2)
    assert not fetches_lazily(loader)
    assert _drain(PrefetchIterator(loader, float("inf"))) == [([0, 1], False), ([2, 3], False), ([4], True)]
    assert _drain(PrefetchIterator([torch.zeros(1), torch.ones(1)], float("inf"))) == [([0.0], False), ([1.0], True)]
    assert PrefetchIterator([], float("inf")).done


def test_a_mid_epoch_start_skips_without_loading_and_keeps_the_shuffled_order():
    full = DataLoader(Counting(12), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(7))
    order = _drain(PrefetchIterator(full, float("inf")))
    data = Counting(12)
    resumed = DataLoader(data, batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(7))
    assert _drain(PrefetchIterator(resumed, float("inf"), skip=2)) == order[2:]
    skipped = {i for batch, _ in order[:2] for i in batch}
    assert skipped.isdisjoint(data.loaded)  # the skipped samples were never read


def test_an_iterable_that_cannot_skip_replays_the_batches_and_says_so(caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="fulmen"):
        batches = _drain(PrefetchIterator(DataLoader(Stream(), batch_size=2), float("inf"), skip=1))
    assert batches == [([2, 3], False), ([4], True)]
    assert "replaying 1 batch of this epoch already trained on (loaded and dropped" in caplog.text


def test_a_start_past_the_end_is_done_at_once():
    iterator = PrefetchIterator(DataLoader(Counting(4), batch_size=2), float("inf"), skip=2)
    assert iterator.done and _drain(iterator) == []

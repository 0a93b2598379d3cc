"""Training data that keeps its own position: a mid-epoch checkpoint holds it and a resumed run reads on from
it, so the resumed run ends with the uninterrupted run's weights and reads no sample twice."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, Sampler

import fulmen
from fulmen.callbacks import ModelCheckpoint, OnExceptionCheckpoint
from fulmen.demos.boring_classes import BoringModel, RandomDataset
from fulmen.loops.fetchers import PrefetchIterator
from fulmen.loops.loader_state import data_parts

SAMPLES, BATCH = 40, 4  # 10 batches an epoch


class Stream(IterableDataset):
    """An iterable dataset that keeps its position (and records every sample it reads)."""

    def __init__(self) -> None:
        self.data = torch.randn(SAMPLES, 32, generator=torch.Generator().manual_seed(0))
        self.pos = 0
        self.reads: list[int] = []

    def __iter__(self) -> Iterator[torch.Tensor]:
        while self.pos < SAMPLES:
            index, self.pos = self.pos, self.pos + 1
            self.reads.append(index)
            yield self.data[index]
        self.pos = 0  # the next epoch starts over

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.pos = state["pos"]


class StreamLoader:
    """A loader that is itself stateful (as torchdata's StatefulDataLoader or a streaming loader is)."""

    def __init__(self) -> None:
        self.stream = Stream()
        self.loaded: list[dict[str, Any]] = []

    def __iter__(self) -> Iterator[torch.Tensor]:
        batch: list[torch.Tensor] = []
        for sample in self.stream:
            batch.append(sample)
            if len(batch) == BATCH:
                yield torch.stack(batch)
                batch = []

    def state_dict(self) -> dict[str, Any]:
        return {"stream": self.stream.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loaded.append(state)
        self.stream.load_state_dict(state["stream"])


class Crash(BoringModel):
    def __init__(self, at_step: int | None = None) -> None:
        super().__init__()
        self.at_step = at_step

    def training_step(self, batch, batch_idx):
        if self.global_step == self.at_step:
            raise RuntimeError("crash")
        return super().training_step(batch, batch_idx)


def _trainer(root: Path, **kwargs: Any) -> fulmen.Trainer:
    return fulmen.Trainer(max_epochs=2, limit_val_batches=0, logger=False, enable_progress_bar=False,
                          enable_model_summary=False, default_root_dir=root, **kwargs)  # fmt: skip


def _fit(root: Path, loader: Any, ckpt_path: Path | None = None, crash: int | None = None) -> dict[str, torch.Tensor]:
    fulmen.seed_everything(7)
    model = Crash(crash)
    callbacks: list[Any] = [ModelCheckpoint(dirpath=root / "ckpt", every_n_train_steps=1, save_top_k=-1)]
    if crash is not None:
        callbacks = [OnExceptionCheckpoint(root / "crash")]
    trainer = _trainer(root, callbacks=callbacks)
    if crash is not None:
        with pytest.raises(RuntimeError, match="crash"):
            trainer.fit(model, loader, ckpt_path=ckpt_path)
    else:
        trainer.fit(model, loader, ckpt_path=ckpt_path)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _assert_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    for key in a:
        assert torch.equal(a[key], b[key]), key


def _stream_loader() -> DataLoader:
    return DataLoader(Stream(), batch_size=BATCH)


@pytest.mark.parametrize("make", [_stream_loader, StreamLoader], ids=["dataset", "loader"])
@pytest.mark.parametrize("step", [3, 14])  # inside the first epoch, inside the second
def test_a_resumed_run_reads_on_from_the_saved_position(tmp_path, make, step):
    whole = make()
    expected = _fit(tmp_path / "a", whole)
    ckpt = tmp_path / "a" / "ckpt" / f"epoch={(step - 1) // 10}-step={step}.ckpt"
    saved = torch.load(ckpt, weights_only=True)
    if make is StreamLoader:  # Lightning's key and layout: one state per stateful train loader
        assert saved["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [{"stream": {"pos": step % 10 * BATCH}}]
    else:
        assert saved["loops"]["fit_loop"]["state_dict"]["fulmen"]["dataset_position"] == [{"pos": step % 10 * BATCH}]
    resumed = make()
    got = _fit(tmp_path / "b", resumed, ckpt_path=ckpt)
    _assert_equal(expected, got)
    stream = resumed.stream if make is StreamLoader else resumed.dataset
    # the rest of the interrupted epoch, then the second epoch when resumed in the first: nothing read again
    done = step % 10 * BATCH
    rest = list(range(done, SAMPLES)) + (list(range(SAMPLES)) if step < 10 else [])
    assert stream.reads == rest


@pytest.mark.parametrize("make", [_stream_loader, StreamLoader], ids=["dataset", "loader"])
def test_a_crash_inside_training_step_resumes_with_that_batch(tmp_path, make):
    expected = _fit(tmp_path / "a", make())
    _fit(tmp_path / "b", make(), crash=6)  # raised in the 7th batch: the look-ahead read the 8th already
    resumed = make()
    got = _fit(tmp_path / "c", resumed, ckpt_path=tmp_path / "b" / "crash" / "on_exception.ckpt")
    _assert_equal(expected, got)
    stream = resumed.stream if make is StreamLoader else resumed.dataset
    assert stream.reads[:4] == list(range(6 * BATCH, 6 * BATCH + 4))


def test_an_iterable_in_worker_processes_has_no_position_to_keep():
    """Each worker iterates its own copy of the dataset: the main process's copy has no position to keep."""
    parts = data_parts(DataLoader(Stream(), batch_size=BATCH, num_workers=2))
    assert parts.holders == [] and parts.snapshot_fn() is None


class CountingSampler(Sampler[int]):
    """A sampler whose order comes from its own state (it advances an epoch counter each pass)."""

    def __init__(self, n: int) -> None:
        self.n, self.passes = n, 0

    def __iter__(self) -> Iterator[int]:
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(100 + self.passes)).tolist()
        self.passes += 1
        return iter(order)

    def __len__(self) -> int:
        return self.n

    def state_dict(self) -> dict[str, int]:
        return {"passes": self.passes}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.passes = state["passes"]


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_a_sampler_with_state_restarts_its_epoch_from_the_epoch_start_state(tmp_path, workers):
    dataset = RandomDataset(32, SAMPLES)

    def loader() -> DataLoader:
        return DataLoader(dataset, batch_size=BATCH, sampler=CountingSampler(SAMPLES),
                          num_workers=workers)  # fmt: skip

    expected = _fit(tmp_path / "a", loader())
    got = _fit(tmp_path / "b", loader(), ckpt_path=tmp_path / "a" / "ckpt" / "epoch=1-step=13.ckpt")
    _assert_equal(expected, got)


def test_the_position_is_taken_before_the_look_ahead_read():
    stream = Stream()
    batches = PrefetchIterator(DataLoader(stream, batch_size=BATCH), float("inf"), snapshot=stream.state_dict)
    assert stream.pos == BATCH  # the first batch is read ahead
    assert batches.position() == {"pos": 0}
    next(batches)
    assert stream.pos == 2 * BATCH and batches.position() == {"pos": BATCH}
    assert batches.position(before_current=True) == {"pos": 0}


def test_lightning_reads_the_loader_state_fulmen_wrote(tmp_path):
    """Files move both ways: Lightning hands the saved state to the same loader's load_state_dict."""
    import lightning.pytorch as pl
    from lightning.pytorch.demos.boring_classes import BoringModel as LightningBoring

    _fit(tmp_path / "a", StreamLoader())
    loader = StreamLoader()
    trainer = pl.Trainer(max_epochs=2, limit_val_batches=0, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(LightningBoring(), loader, ckpt_path=tmp_path / "a" / "ckpt" / "epoch=0-step=3.ckpt")
    assert loader.loaded == [{"stream": {"pos": 3 * BATCH}}]


def test_fulmen_reads_the_loader_state_lightning_wrote(tmp_path):
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint as LightningCheckpoint
    from lightning.pytorch.demos.boring_classes import BoringModel as LightningBoring

    cb = LightningCheckpoint(dirpath=tmp_path / "l", every_n_train_steps=3, save_top_k=-1)
    trainer = pl.Trainer(max_steps=3, limit_val_batches=0, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path, callbacks=[cb])  # fmt: skip
    trainer.fit(LightningBoring(), StreamLoader())
    saved = torch.load(tmp_path / "l" / "epoch=0-step=3.ckpt", weights_only=True)
    state = saved["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    loader = StreamLoader()
    _trainer(tmp_path / "f").fit(BoringModel(), loader, ckpt_path=tmp_path / "l" / "epoch=0-step=3.ckpt")
    assert loader.loaded == state
    assert loader.stream.reads[0] == state[0]["stream"]["pos"]  # read on from there: nothing replayed


class ShardedStream(IterableDataset):
    """Samples shared out over workers by index; each worker's position is its state (torchdata asks each
    worker for it). Every read is appended to a file per process, to count reads across worker processes."""

    def __init__(self, reads: Path) -> None:
        self.data = torch.randn(SAMPLES, 32, generator=torch.Generator().manual_seed(0))
        self.reads, self.pos, self._start = reads, 0, 0

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info else (0, 1)
        mine = list(range(worker, SAMPLES, workers))
        self.pos, self._start = self._start, 0
        while self.pos < len(mine):
            index = mine[self.pos]
            self.pos += 1
            with open(self.reads / f"{os.getpid()}", "a") as log:
                log.write(f"{index}\n")
            yield self.data[index]

    def state_dict(self) -> dict[str, int]:
        return {"pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._start = state["pos"]


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_torchdata_stateful_dataloader_resumes_without_reading_again(tmp_path, workers):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def run(name: str, ckpt: Path | None = None) -> tuple[dict[str, torch.Tensor], list[int]]:
        reads = tmp_path / f"reads-{name}"
        reads.mkdir()
        loader = stateful.StatefulDataLoader(ShardedStream(reads), batch_size=BATCH, num_workers=workers)
        weights = _fit(tmp_path / name, loader, ckpt_path=ckpt)
        return weights, [int(i) for f in reads.iterdir() for i in f.read_text().split()]

    expected, _ = run("a")
    ckpt = tmp_path / "a" / "ckpt" / "epoch=0-step=4.ckpt"
    assert torch.load(ckpt, weights_only=True)["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    got, reads = run("b", ckpt)
    _assert_equal(expected, got)
    trained = {i for i in range(SAMPLES) if reads.count(i) == 1}  # read once: trained before the checkpoint
    assert len(trained) == 4 * BATCH and all(reads.count(i) in (1, 2) for i in range(SAMPLES))


def test_a_loader_restored_at_an_epoch_end_trains_the_next_epoch_whole(tmp_path):
    """A stream restored to its end-of-epoch position first yields that epoch's (empty) rest: the loop then
    starts the next epoch instead of counting an empty one."""
    stateful = pytest.importorskip("torchdata.stateful_dataloader")

    def run(name: str, ckpt: Path | None = None) -> tuple[dict[str, torch.Tensor], list[int]]:
        reads = tmp_path / f"reads-{name}"
        reads.mkdir()
        fulmen.seed_everything(7)
        model = Crash()
        ends = ModelCheckpoint(dirpath=tmp_path / name, every_n_epochs=1, save_top_k=-1, save_on_train_epoch_end=True)
        trainer = _trainer(tmp_path / name, callbacks=[ends])
        trainer.fit(model, stateful.StatefulDataLoader(ShardedStream(reads), batch_size=BATCH), ckpt_path=ckpt)
        assert trainer.global_step == 20
        return model.state_dict(), [int(i) for f in reads.iterdir() for i in f.read_text().split()]

    expected, _ = run("a")
    got, reads = run("b", tmp_path / "a" / "epoch=0-step=10.ckpt")
    _assert_equal(expected, got)
    assert sorted(reads) == list(range(SAMPLES))

"""The demo models and data that examples import (``fulmen.demos.Transformer`` ..., ``demos.lstm``,
``demos.mnist_datamodule``) and ``fulmen.cli_lightning_logo``: they build, read their data and train."""

from __future__ import annotations

import gzip
import urllib.request

import pytest
import torch
from torch.utils.data import DataLoader

import fulmen
from fulmen.demos import LightningTransformer, Transformer, WikiText2
from fulmen.demos.lstm import LightningLSTM, SequenceSampler, SimpleLSTM
from fulmen.demos.mnist_datamodule import MNIST, MNISTDataModule

QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)


def _text(root):
    """The corpus where Lightning's WikiText2 reads it: ``<data_dir>/wikitext-2.txt``."""
    root.mkdir(parents=True, exist_ok=True)
    words = ["the", "cat", "sat", "on", "the", "mat", "and", "the", "dog", "sat", "on", "the", "log"]
    (root / "wikitext-2.txt").write_text("\n".join(" ".join(words[i:] + words[:i]) for i in range(12)))
    return root


def test_wikitext2_blocks_and_the_transformer_trains(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the module's prepare_data reads ./data/wikitext-2.txt: there, no download
    data = WikiText2(_text(tmp_path / "data"), block_size=8, download=False)
    inputs, target = data[0]
    assert inputs.shape == target.shape == (8,) and torch.equal(inputs[1:], target[:-1])
    assert data.vocab_size == 9  # 8 words and <eos>
    assert Transformer(vocab_size=10)(inputs[None], target[None]).shape == (8, 10)
    trainer = fulmen.Trainer(max_steps=2, **QUIET)
    trainer.fit(LightningTransformer(vocab_size=data.vocab_size), DataLoader(data, batch_size=2))
    assert trainer.global_step == 2 and torch.isfinite(trainer.callback_metrics.get("loss", torch.zeros(())))


def test_a_missing_corpus_is_said_and_a_failed_download_leaves_no_file(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="download=True"):
        WikiText2(tmp_path, download=False)

    def offline(url, filename):
        raise OSError("no network")

    monkeypatch.setattr(urllib.request, "urlretrieve", offline)
    with pytest.raises(RuntimeError, match="could not download"):
        WikiText2(tmp_path)
    assert list(tmp_path.iterdir()) == []  # no half-written corpus
    # a corpus already in place is read, never downloaded again (download=True is the default)
    assert WikiText2(_text(tmp_path)).vocab_size == 9


def test_the_lstm_carries_its_state_over_sequence_batches(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = WikiText2(_text(tmp_path / "data"), block_size=4, download=False)
    sampler = SequenceSampler(data, batch_size=2)
    batches = list(sampler)
    assert len(batches) == len(sampler) == len(data) // 2
    assert batches[0] == [0, len(data) // 2] and batches[1] == [1, len(data) // 2 + 1]
    lstm = SimpleLSTM(vocab_size=10, ninp=8, nhid=8, nlayers=2)
    output, hidden = lstm(torch.zeros(2, 4, dtype=torch.long), lstm.init_hidden(2))
    assert output.shape == (8, 10) and hidden[0].shape == (2, 2, 8)
    model = LightningLSTM(vocab_size=data.vocab_size)
    trainer = fulmen.Trainer(max_steps=3, **QUIET)
    trainer.fit(model, DataLoader(data, batch_sampler=sampler))
    assert trainer.global_step == 3 and model.hidden is None  # dropped at the epoch end


def _idx(path, array, gz):
    header = bytes([0, 0, 8, array.ndim]) + b"".join(n.to_bytes(4, "big") for n in array.shape)
    payload = header + array.numpy().tobytes()
    path.write_bytes(gzip.compress(payload) if gz else payload)


def test_mnist_reads_idx_files_and_the_datamodule_splits(tmp_path):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    for prefix, n, gz in (("train", 30, True), ("t10k", 10, False)):
        images = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
        _idx(raw / (f"{prefix}-images-idx3-ubyte" + (".gz" if gz else "")), images, gz)
        _idx(raw / (f"{prefix}-labels-idx1-ubyte" + (".gz" if gz else "")), torch.arange(n, dtype=torch.uint8) % 10, gz)
    train = MNIST(str(tmp_path), train=True, download=False)
    image, label = train[3]
    assert len(train) == 30 and image.shape == (1, 28, 28) and label == 3
    assert image.mean().item() == pytest.approx(((train.data[3].float() / 255 - 0.1307) / 0.3081).mean().item())
    dm = MNISTDataModule(str(tmp_path), val_split=5, num_workers=0, batch_size=4)
    dm.prepare_data()
    dm.setup("fit")
    assert (len(dm.dataset_train), len(dm.dataset_val), len(dm.test_dataloader().dataset)) == (25, 5, 10)
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 1, 28, 28) and y.dtype == torch.long
    assert x.min() >= 0 and x.max() <= 1  # normalize=False: scaled to [0, 1] only
    assert len(dm.train_dataloader()) == 25 // 4  # the last incomplete batch is dropped


def test_cli_lightning_logo_prints_a_banner(capsys):
    fulmen.cli_lightning_logo()
    assert "|_|" in capsys.readouterr().out

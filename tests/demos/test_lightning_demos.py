"""The demo classes Lightning's ``demos`` package has, against Lightning's own: same shapes, same data, same
numbers for the same weights, and the data files read where Lightning reads them (no download then)."""

from __future__ import annotations

import inspect
import urllib.request

import pytest
import torch
from torch.utils.data import DataLoader

import fulmen
from fulmen.demos import boring_classes as ours
from tests.parity import oracle

QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)


def _theirs():
    oracle.lightning()
    from lightning.pytorch.demos import boring_classes

    return boring_classes


@oracle.parity
def test_datasets_have_lightnings_items_and_lengths():
    theirs = _theirs()
    for name, args in (("RandomDictDataset", (4, 3)), ("RandomIterableDatasetWithLen", (4, 3))):
        torch.manual_seed(0)
        mine = list(getattr(ours, name)(*args))
        torch.manual_seed(0)
        reference = list(getattr(theirs, name)(*args))
        assert len(getattr(ours, name)(*args)) == len(getattr(theirs, name)(*args)) == 3
        for a, b in zip(mine, reference):
            if isinstance(b, dict):
                assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b)
            else:
                assert torch.equal(a, b)


@oracle.parity
@pytest.mark.parametrize("name", ["BoringDataModuleNoLen", "IterableBoringDataModule"])
def test_datamodules_set_up_lightnings_loaders_per_stage(name):
    theirs = _theirs()

    def describe(dm, stage):
        dm.setup(stage)
        out = {}
        for split in ("train", "val", "test", "predict"):
            try:
                loaders = getattr(dm, f"{split}_dataloader")()
            except AttributeError:  # that split is not set up by this stage
                continue
            loaders = loaders if isinstance(loaders, list) else [loaders]
            out[split] = [(type(dl.dataset).__name__, dl.batch_size, len(list(dl)), next(iter(dl)).shape)
                          for dl in loaders]  # fmt: skip
        return out

    for stage in ("fit", "validate", "test", "predict"):
        assert describe(getattr(ours, name)(), stage) == describe(getattr(theirs, name)(), stage)


@oracle.parity
def test_demo_model_and_net_compute_what_lightnings_do():
    theirs = _theirs()
    for name, make_input in (("DemoModel", lambda: torch.randn(3, 32)), ("Net", lambda: torch.randn(2, 1, 28, 28))):
        reference, mine = getattr(theirs, name)(), getattr(ours, name)()
        mine.load_state_dict(reference.state_dict())
        reference.eval(), mine.eval()
        x = make_input()
        assert torch.allclose(mine(x), reference(x))
    reference, mine = theirs.DemoModel(out_dim=3, learning_rate=0.5), ours.DemoModel(out_dim=3, learning_rate=0.5)
    mine.load_state_dict(reference.state_dict())
    x = torch.randn(4, 32)
    assert torch.allclose(mine.training_step(x, 0), reference.training_step(x, 0))
    assert type(mine.configure_optimizers()) is type(reference.configure_optimizers())
    assert mine.configure_optimizers().defaults["lr"] == 0.5


def test_demo_model_and_manual_optimization_train():
    model = ours.ManualOptimBoringModel()
    assert model.automatic_optimization is False
    before = model.layer.weight.detach().clone()
    trainer = fulmen.Trainer(max_steps=3, limit_val_batches=0, **QUIET)
    trainer.fit(model)
    assert trainer.global_step == 3 and not torch.equal(before, model.layer.weight)
    demo = ours.DemoModel()
    fulmen.Trainer(max_steps=2, **QUIET).fit(demo, DataLoader(torch.randn(8, 32), batch_size=4))
    assert demo.l1.weight.grad is not None


@oracle.parity
def test_transformer_gives_log_probabilities_and_lightnings_mask():
    oracle.lightning()
    from lightning.pytorch.demos.transformer import Transformer as LTransformer

    from fulmen.demos import Transformer

    model = Transformer(vocab_size=10).eval()
    x = torch.randint(0, 10, (2, 5))
    assert torch.allclose(model(x, x).exp().sum(-1), torch.ones(10), atol=1e-5)  # ready for nll_loss
    assert torch.equal(model.generate_square_subsequent_mask(4), LTransformer(vocab_size=10).generate_square_subsequent_mask(4))


@oracle.parity
def test_signatures_are_lightnings():
    oracle.lightning()
    from lightning.pytorch.demos import mnist_datamodule as lmnist
    from lightning.pytorch.demos import transformer as ltransformer

    from fulmen.demos import mnist_datamodule, transformer

    def shape(obj):
        return [(p.name, p.kind, p.default) for p in inspect.signature(obj).parameters.values()]

    assert shape(transformer.WikiText2) == shape(ltransformer.WikiText2)
    assert shape(mnist_datamodule.MNISTDataModule) == shape(lmnist.MNISTDataModule)
    assert shape(mnist_datamodule.MNIST) == shape(lmnist.MNIST)


def _corpus(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wikitext-2.txt").write_text("a b c d e f g h\n" * 300)  # 2,700 tokens: 20 streams of 3 blocks


@oracle.parity
def test_wikitext2_reads_the_file_where_lightning_does(tmp_path, monkeypatch):
    """The same file satisfies both: with it in place neither downloads (the network is cut here)."""
    oracle.lightning()
    from lightning.pytorch.demos.transformer import WikiText2 as LWikiText2

    from fulmen.demos import WikiText2

    def no_network(*args, **kwargs):
        raise AssertionError("downloaded although the corpus is in place")

    monkeypatch.setattr(urllib.request, "urlretrieve", no_network)
    _corpus(tmp_path)
    mine, reference = WikiText2(tmp_path, block_size=5), LWikiText2(tmp_path, block_size=5)
    assert mine.path == reference.path and len(mine) == len(reference) and mine.vocab_size == reference.vocab_size
    assert all(torch.equal(a, b) for a, b in zip(mine[3], reference[3]))


@pytest.mark.parametrize("model_name", ["LightningLSTM", "LightningTransformer"])
def test_the_language_models_find_their_data_in_dot_data(tmp_path, monkeypatch, model_name):
    """``prepare_data`` and ``train_dataloader`` read ``./data/wikitext-2.txt``; with it there, fit downloads
    nothing and trains."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(urllib.request, "urlretrieve", lambda *a, **k: pytest.fail("downloaded"))
    _corpus(tmp_path / "data")
    model = getattr(fulmen.demos, model_name)(vocab_size=9)
    if model_name == "LightningLSTM":
        model.model = fulmen.demos.SimpleLSTM(vocab_size=9, ninp=8, nhid=8, nlayers=1)  # small: a fast test
    trainer = fulmen.Trainer(max_steps=2, **QUIET)
    trainer.fit(model)
    assert trainer.global_step == 2


def test_mnist_reads_lightnings_cached_tensors_without_downloading(tmp_path, monkeypatch):
    """A ``MNIST/complete/{training,test}.pt`` pair (where Lightning's own MNIST keeps its data) is read as it
    is; nothing is fetched."""
    from fulmen.demos.mnist_datamodule import MNIST, MNISTDataModule

    monkeypatch.setattr(urllib.request, "urlretrieve", lambda *a, **k: pytest.fail("downloaded"))
    folder = tmp_path / "MNIST" / "complete"
    folder.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)
    for name, n in (("training.pt", 20), ("test.pt", 8)):
        images = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
        torch.save((images, torch.arange(n) % 10), folder / name)
    data = MNIST(str(tmp_path), train=False, normalize=None)
    image, label = data[3]
    assert len(data) == 8 and label == 3 and image.shape == (1, 28, 28) and 0 <= image.min() <= image.max() <= 1
    dm = MNISTDataModule(str(tmp_path), val_split=4, num_workers=0, normalize=True, batch_size=4)
    dm.prepare_data()
    dm.setup("fit")
    x, _ = next(iter(dm.val_dataloader()))
    assert (len(dm.dataset_train), len(dm.dataset_val)) == (16, 4) and x.min() >= -1 and x.max() <= 1
    assert dm.num_classes == 10 and dm.name == "mnist"
    with pytest.raises(TypeError, match="root_dir="):
        MNIST(str(tmp_path), root_dir="x")


def _varied_corpus(folder):
    """Lines of 0 to 12 words from a 60-word vocabulary, blank and space-padded lines among them (what
    WikiText-2's own layout has): a vocabulary and a token order worth comparing."""
    g = torch.Generator().manual_seed(0)
    lines = []
    for _ in range(120):
        n = int(torch.randint(0, 13, (1,), generator=g))
        lines.append(" " + " ".join(f"w{int(i)}" for i in torch.randint(0, 60, (n,), generator=g)) + " ")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wikitext-2.txt").write_text("\n".join(lines) + "\n")


@oracle.parity
def test_wikitext2_gives_lightnings_tensors_at_every_index(tmp_path):
    oracle.lightning()
    from lightning.pytorch.demos.transformer import WikiText2 as LWikiText2

    from fulmen.demos import WikiText2

    _varied_corpus(tmp_path)
    for block_size in (7, 35):
        mine, reference = WikiText2(tmp_path, block_size, download=False), LWikiText2(tmp_path, block_size, False)
        assert torch.equal(mine.data, reference.data) and mine.dictionary.idx2word == reference.dictionary.idx2word
        assert len(mine) == len(reference)
        # past the end and negative too: the last, ragged block is where a one-chunk split would differ
        for index in range(-3, len(reference) + 3):
            assert all(torch.equal(a, b) for a, b in zip(mine[index], reference[index])), index


@oracle.parity
def test_transformer_construction_and_forward_are_lightnings():
    oracle.lightning()
    from lightning.pytorch.demos.transformer import Transformer as LTransformer

    from fulmen.demos import Transformer

    torch.manual_seed(0)
    reference = LTransformer(vocab_size=100)
    torch.manual_seed(0)
    mine = Transformer(vocab_size=100)
    assert str(mine) == str(reference) and [n for n, _ in mine.named_buffers()] == []
    theirs = reference.state_dict()
    assert list(mine.state_dict()) == list(theirs)
    assert all(torch.equal(v, theirs[k]) for k, v in mine.state_dict().items())  # same draws, same order
    inputs, target = torch.randint(0, 100, (2, 2, 9))
    for train in (False, True):  # in training, the same dropout draws too
        mine.train(train), reference.train(train)
        torch.manual_seed(1)
        out = mine(inputs, target)
        torch.manual_seed(1)
        assert torch.equal(out, reference(inputs, target))


def _train_language_models(pl, demos, data_dir):
    """A program built on the demos, as examples write them: WikiText2 split at random, a Transformer
    trained and validated on it; then LightningTransformer and LightningLSTM fit on ``./data``. Returns the
    losses of every step and the weights at the end."""
    from torch.nn.functional import nll_loss
    from torch.utils.data import random_split

    losses = []

    class LanguageModel(pl.LightningModule):
        def __init__(self, vocab_size):
            super().__init__()
            self.model = demos.Transformer(vocab_size=vocab_size, ninp=32, nhead=2, nhid=32, nlayers=1)

        def training_step(self, batch, batch_idx):
            inputs, target = batch
            loss = nll_loss(self.model(inputs, target), target.reshape(-1))
            losses.append(loss.detach())
            return loss

        def validation_step(self, batch, batch_idx):
            inputs, target = batch
            self.log("val_loss", nll_loss(self.model(inputs, target), target.reshape(-1)))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    quiet = dict(QUIET, enable_model_summary=False)
    pl.seed_everything(42, verbose=False)
    dataset = demos.WikiText2(data_dir, block_size=12, download=False)
    train, val = random_split(dataset, [0.8, 0.2])
    model = LanguageModel(dataset.vocab_size)
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=6, limit_val_batches=2, **quiet)
    trainer.fit(model, DataLoader(train, batch_size=4, shuffle=True), DataLoader(val, batch_size=4))
    weights = {"transformer": model.state_dict()}
    losses.append(trainer.callback_metrics["val_loss"])

    pl.seed_everything(1, verbose=False)  # the packaged modules read ./data/wikitext-2.txt, batch size 1
    packaged = demos.LightningTransformer(vocab_size=dataset.vocab_size)
    pl.Trainer(max_steps=2, **quiet).fit(packaged)
    weights["LightningTransformer"] = packaged.state_dict()

    pl.seed_everything(2, verbose=False)
    lstm = demos.LightningLSTM(vocab_size=dataset.vocab_size)
    lstm.model = type(lstm.model)(vocab_size=dataset.vocab_size, ninp=16, nhid=16, nlayers=2)  # small: fast
    trainer = pl.Trainer(max_steps=3, **quiet)
    trainer.fit(lstm)
    weights["LightningLSTM"] = lstm.state_dict()
    losses.append(trainer.callback_metrics["train_loss"])
    return torch.stack(losses), weights


@oracle.parity
def test_language_models_train_to_lightnings_numbers(tmp_path, monkeypatch):
    """Same seed, same corpus: the same loss at every step and the same weights after, to the bit (CPU)."""
    oracle.lightning()
    from lightning import pytorch as lightning
    from lightning.pytorch import demos as ldemos

    monkeypatch.chdir(tmp_path)
    _varied_corpus(tmp_path / "data")
    mine, mine_weights = _train_language_models(fulmen, fulmen.demos, tmp_path / "data")
    reference, reference_weights = _train_language_models(lightning, ldemos, tmp_path / "data")
    assert torch.equal(mine, reference), (mine, reference)
    for name, theirs in reference_weights.items():
        assert list(mine_weights[name]) == list(theirs)
        assert all(torch.equal(v, theirs[k]) for k, v in mine_weights[name].items()), name

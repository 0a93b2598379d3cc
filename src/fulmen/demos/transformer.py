"""A small word-level language model for examples: ``Transformer``, the ``WikiText2`` dataset it reads and
``LightningTransformer`` that trains it (the names examples import from ``lightning.pytorch.demos``).

``WikiText2`` reads ``<data_dir>/wikitext-2.txt`` (a plain text file, one sentence per line: the training
split of WikiText-2); with ``download=True`` a missing file is fetched from ``WikiText2.url`` first, and a file
already there is never fetched again. Without network access, place the file there yourself (any text works:
the vocabulary is built from it).
"""

from __future__ import annotations

import math
import os
import urllib.request
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset

from fulmen.core.module import LightningModule
from fulmen.utilities.imports import _REQUESTS_AVAILABLE as _REQUESTS_AVAILABLE
from fulmen.utilities.imports import RequirementCache as RequirementCache


class PositionalEncoding(nn.Module):
    """The sine / cosine position signal added to the token embeddings.

    Lightning 2.6.6's demo adds the signal of ONE position, the one numbered by the sequence length, to every
    position of the sequence (observed: a ``(batch, 5, dim)`` input gets ``sin(5), cos(5), ...`` on all five
    rows) instead of each position's own row. Examples written against ``lightning.pytorch.demos`` train to the
    numbers that choice gives, so it is kept here: with per-position rows the same seed gives other losses and
    weights from the first step on.
    """

    def __init__(self, dim: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        self.dim = dim
        self.max_len = max_len
        # Built on the first forward, on the input's device, and kept float32 whatever the module is cast to:
        # a plain attribute rather than a buffer, as Lightning's is (no buffer in ``named_buffers()``, and a
        # float64 or half input meets the same float32 rows, with torch's type promotion).
        self.pe: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:  # (batch, sequence, dim)
        if self.pe is None or self.pe.device != x.device:
            self.pe = self._init_pos_encoding(x.device)
        # One row, broadcast over the sequence: see the class docstring. Like Lightning, a sequence of
        # ``max_len`` tokens or more is an IndexError.
        return self.dropout(x + self.pe[:, x.size(1)])

    def _init_pos_encoding(self, device: torch.device) -> Tensor:
        """The ``(1, max_len, dim)`` table: ``sin`` in the even columns, ``cos`` in the odd ones."""
        position = torch.arange(self.max_len, device=device).unsqueeze(1)
        scale = torch.exp(torch.arange(0, self.dim, 2, device=device) * (-math.log(10000.0) / self.dim))
        table = torch.zeros(self.max_len, self.dim, device=device)
        table[:, 0::2] = torch.sin(position * scale)
        table[:, 1::2] = torch.cos(position * scale[: self.dim // 2])
        return table.unsqueeze(0)


class Transformer(nn.Module):
    """Encoder-decoder ``nn.Transformer`` over token ids: ``forward(inputs, target)`` returns the
    log-probabilities of the next token at every position of ``target`` (``(batch * sequence, vocab_size)``,
    ready for ``nll_loss``)."""

    def __init__(
        self, vocab_size: int = 33278, ninp: int = 200, nhead: int = 2, nhid: int = 200, nlayers: int = 2,
        dropout: float = 0.2,
    ) -> None:  # fmt: skip
        super().__init__()
        self.vocab_size = vocab_size
        # Registered before the embedding, as Lightning's are: the same module order in ``print(model)``,
        # ``named_modules()`` and summaries (the positional encoding draws nothing, so the weights do not move).
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.transformer = nn.Transformer(
            d_model=ninp, nhead=nhead, num_encoder_layers=nlayers, num_decoder_layers=nlayers,
            dim_feedforward=nhid, dropout=dropout, batch_first=True,
        )  # fmt: skip
        self.decoder = nn.Linear(ninp, vocab_size)
        self.ninp = ninp

    def generate_square_subsequent_mask(self, size: int) -> Tensor:
        """The attention mask that lets each of ``size`` positions see itself and the positions before it:
        0 on and below the diagonal, ``-inf`` above."""
        return torch.triu(torch.full((size, size), float("-inf")), diagonal=1)

    def forward(self, inputs: Tensor, target: Tensor, mask: Tensor | None = None) -> Tensor:
        _, length = target.shape
        if mask is None:  # each position sees the positions before it only
            mask = self.generate_square_subsequent_mask(length).to(target.device)
        src = self.pos_encoder(self.embedding(inputs) * math.sqrt(self.ninp))
        tgt = self.pos_encoder(self.embedding(target) * math.sqrt(self.ninp))
        output = self.transformer(src, tgt, tgt_mask=mask)
        return torch.log_softmax(self.decoder(output), dim=-1).view(-1, self.vocab_size)


class Dictionary:
    """Words to ids, in order of first appearance."""

    def __init__(self) -> None:
        self.word2idx: dict[str, int] = {}
        self.idx2word: list[str] = []

    def add_word(self, word: str) -> int:
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self) -> int:
        return len(self.idx2word)


def tokenize(path: str | Path) -> tuple[Tensor, Dictionary]:
    """Every word of the file (with an ``<eos>`` after each line) as ids, and the dictionary built."""
    dictionary = Dictionary()
    ids: list[int] = []
    with open(path, encoding="utf8") as f:
        for line in f:
            ids.extend(dictionary.add_word(word) for word in line.split() + ["<eos>"])
    return torch.tensor(ids, dtype=torch.long), dictionary


class WikiText2(Dataset):
    """Blocks of ``block_size`` token ids and the same block shifted by one (the next-word targets)."""

    url = "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/train.txt"

    def __init__(self, data_dir: Path = Path("./data"), block_size: int = 35, download: bool = True) -> None:
        super().__init__()
        self.path = Path(data_dir) / "wikitext-2.txt"
        if download:
            self.download(self.path)
        elif not self.path.exists():
            raise FileNotFoundError(
                f"WikiText2: {self.path} does not exist. Pass download=True to fetch it, or put a text file there."
            )
        self.data, self.dictionary = tokenize(self.path)
        self.block_size = block_size

    @property
    def vocab_size(self) -> int:
        return len(self.dictionary)

    def __len__(self) -> int:
        return len(self.data) // self.block_size - 1

    def __getitem__(self, index: int) -> tuple[Tensor, Tensor]:
        # Inputs and targets are two slices, one token apart, rather than one chunk split in two: the same for
        # every index below ``len(self)``, and beyond it (the last partial block, negative indices) the same
        # ragged pairs Lightning's data set gives.
        start = index * self.block_size
        return self.data[start : start + self.block_size], self.data[start + 1 : start + 1 + self.block_size]

    @classmethod
    def download(cls, destination: Path) -> None:
        """Fetch the corpus to ``destination`` unless a file is already there."""
        destination = Path(destination)
        if destination.exists():
            return
        destination.parent.mkdir(parents=True, exist_ok=True)
        partial = destination.with_suffix(".part")
        try:
            urllib.request.urlretrieve(cls.url, partial)
        except OSError as err:
            raise RuntimeError(
                f"WikiText2 could not download {cls.url} ({err}). Without network access, put a text file at "
                f"{destination} (download=False)."
            ) from err
        os.replace(partial, destination)  # never a half-written corpus


class LightningTransformer(LightningModule):
    """Trains :class:`Transformer` on next-word prediction (negative log-likelihood), with SGD; its data is
    :class:`WikiText2` in ``./data`` (fetched by ``prepare_data`` when missing)."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = Transformer(vocab_size=vocab_size)

    def forward(self, inputs: Tensor, target: Tensor) -> Tensor:
        return self.model(inputs, target)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, target = batch
        output = self(inputs, target)
        return nn.functional.nll_loss(output, target.reshape(-1))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.model.parameters(), lr=0.1)

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(WikiText2())


__all__ = ["LightningTransformer", "Transformer", "WikiText2"]

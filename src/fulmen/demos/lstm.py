"""A word-level LSTM language model for examples: ``SimpleLSTM``, ``SequenceSampler`` and ``LightningLSTM``
(the names examples import from ``lightning.pytorch.demos.lstm``). Data: ``transformer.WikiText2``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Sampler

from fulmen.core.module import LightningModule
from fulmen.demos.transformer import WikiText2


class SimpleLSTM(nn.Module):
    """Embedding -> LSTM -> linear decoder; ``forward(input, hidden)`` returns the logits and the new hidden
    state (``init_hidden(batch_size)`` gives the first)."""

    def __init__(
        self, vocab_size: int = 33278, ninp: int = 512, nhid: int = 512, nlayers: int = 4, dropout: float = 0.2
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(vocab_size, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout if nlayers > 1 else 0.0, batch_first=True)
        self.decoder = nn.Linear(nhid, vocab_size)
        self.nlayers = nlayers
        self.nhid = nhid
        self.init_weights()

    def init_weights(self) -> None:
        """Small uniform embedding and decoder weights, a zero decoder bias."""
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input: Tensor, hidden: tuple[Tensor, Tensor]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        output, hidden = self.rnn(self.drop(self.encoder(input)), hidden)
        decoded = self.decoder(self.drop(output)).view(-1, self.vocab_size)
        return torch.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, batch_size: int) -> tuple[Tensor, Tensor]:
        weight = next(self.parameters())
        shape = (self.nlayers, batch_size, self.nhid)
        return weight.new_zeros(shape), weight.new_zeros(shape)


class SequenceSampler(Sampler[list[int]]):
    """Batches whose rows continue each other from one batch to the next (the text split in ``batch_size``
    streams), so that an LSTM's hidden state can be carried over."""

    def __init__(self, dataset: Any, batch_size: int) -> None:
        super().__init__()
        self.dataset = dataset
        self.batch_size = batch_size
        self.chunk_size = len(dataset) // batch_size

    def __iter__(self) -> Iterator[list[int]]:
        for i in range(self.chunk_size):
            yield [row * self.chunk_size + i for row in range(self.batch_size)]

    def __len__(self) -> int:
        return self.chunk_size


class LightningLSTM(LightningModule):
    """Trains :class:`SimpleLSTM`, carrying the hidden state over batches (detached between them); its data is
    :class:`WikiText2` in ``./data`` in 20 streams (fetched by ``prepare_data`` when missing)."""

    def __init__(self, vocab_size: int = 33278) -> None:
        super().__init__()
        self.model = SimpleLSTM(vocab_size=vocab_size)
        self.hidden: tuple[Tensor, Tensor] | None = None

    def on_train_epoch_end(self) -> None:
        self.hidden = None

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        inputs, target = batch
        if self.hidden is None or self.hidden[0].size(1) != inputs.size(0):
            self.hidden = self.model.init_hidden(inputs.size(0))
        self.hidden = (self.hidden[0].detach(), self.hidden[1].detach())
        output, self.hidden = self.model(inputs, self.hidden)
        loss = nn.functional.nll_loss(output, target.reshape(-1))
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def prepare_data(self) -> None:
        WikiText2(download=True)

    def train_dataloader(self) -> DataLoader:
        dataset = WikiText2()
        return DataLoader(dataset, batch_sampler=SequenceSampler(dataset, batch_size=20))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=20.0)


__all__ = ["LightningLSTM", "SequenceSampler", "SimpleLSTM"]

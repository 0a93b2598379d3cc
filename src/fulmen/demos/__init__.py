"""Bundled demos: ``BoringModel`` and friends for tests, the models examples import (``Transformer``,
``WikiText2``, ``LightningTransformer``, ``LightningLSTM``, ``demos.mnist_datamodule``), as Lightning's
``demos`` package has them, and the digits classifier (``python -m fulmen.demos.digits``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.utilities.imports import lazy_exports

if TYPE_CHECKING:
    from fulmen.demos.boring_classes import (
        BoringDataModule,
        BoringModel,
        DemoModel,
        RandomDataset,
        RandomIterableDataset,
    )
    from fulmen.demos.lstm import LightningLSTM, SequenceSampler, SimpleLSTM
    from fulmen.demos.transformer import LightningTransformer, Transformer, WikiText2

_WHERE = {name: "boring_classes" for name in ("BoringDataModule", "BoringModel", "DemoModel", "RandomDataset",
                                              "RandomIterableDataset")}  # fmt: skip
_WHERE.update({name: "lstm" for name in ("LightningLSTM", "SequenceSampler", "SimpleLSTM")})
_WHERE.update({name: "transformer" for name in ("LightningTransformer", "Transformer", "WikiText2")})

__getattr__, __dir__ = lazy_exports("fulmen.demos", _WHERE)

__all__ = [
    "BoringDataModule", "BoringModel", "DemoModel", "LightningLSTM", "LightningTransformer", "RandomDataset",
    "RandomIterableDataset", "SequenceSampler", "SimpleLSTM", "Transformer", "WikiText2",
]  # fmt: skip

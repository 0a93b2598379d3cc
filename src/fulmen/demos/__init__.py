"""Bundled demos: ``BoringModel`` and friends for tests, the models examples import (``Transformer``,
``WikiText2``, ``LightningTransformer``, ``demos.lstm``, ``demos.mnist_datamodule``), as Lightning's ``demos``
package has them, and the digits classifier (``python -m fulmen.demos.digits``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.utilities.imports import lazy_exports

if TYPE_CHECKING:
    from fulmen.demos.boring_classes import (
        BoringDataModule,
        BoringModel,
        RandomDataset,
        RandomIterableDataset,
    )
    from fulmen.demos.transformer import LightningTransformer, Transformer, WikiText2

_WHERE = {name: "boring_classes" for name in ("BoringDataModule", "BoringModel", "RandomDataset",
                                              "RandomIterableDataset")}  # fmt: skip

_WHERE.update({name: "transformer" for name in ("LightningTransformer", "Transformer", "WikiText2")})

__getattr__, __dir__ = lazy_exports("fulmen.demos", _WHERE)

__all__ = [
    "BoringDataModule", "BoringModel", "LightningTransformer", "RandomDataset", "RandomIterableDataset", "Transformer",
    "WikiText2",
]  # fmt: skip

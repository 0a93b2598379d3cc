"""Bundled demos: ``BoringModel`` and friends for tests and examples (``fulmen.demos.BoringModel``, as
Lightning's ``demos`` package has them) and the digits classifier (``python -m fulmen.demos.digits``)."""

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

_WHERE = {name: "boring_classes" for name in ("BoringDataModule", "BoringModel", "RandomDataset",
                                              "RandomIterableDataset")}  # fmt: skip

__getattr__, __dir__ = lazy_exports("fulmen.demos", _WHERE)

__all__ = ["BoringDataModule", "BoringModel", "RandomDataset", "RandomIterableDataset"]

"""Helpers for dataloaders: lengths, batch sizes, limits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.utils.data import IterableDataset

from fulmen.utilities.exceptions import MisconfigurationException


def has_len(dataloader: object) -> bool:
    """True if ``len(dataloader)`` works and is finite. A zero length counts as having a length."""
    try:
        n = len(dataloader)  # type: ignore[arg-type]
    except (TypeError, NotImplementedError):
        return False
    return n is not None


def sized_len(dataloader: object) -> int | None:
    return len(dataloader) if has_len(dataloader) else None  # type: ignore[arg-type]


def is_iterable_dataset(dataloader: object) -> bool:
    dataset = getattr(dataloader, "dataset", None)
    return isinstance(dataset, IterableDataset)


def extract_batch_size(batch: Any) -> int:
    """Size of the first dimension of the first tensor found in ``batch`` (1 for scalars)."""
    found = _first_tensor_size(batch)
    if found is None:
        raise MisconfigurationException(
            "Could not infer the batch size from the batch to weight the epoch mean of a logged value. "
            "Pass it explicitly: self.log(..., batch_size=N)."
        )
    return found


def _first_tensor_size(batch: Any) -> int | None:
    if isinstance(batch, torch.Tensor):
        return 1 if batch.ndim == 0 else batch.size(0)
    if isinstance(batch, (str, bytes)):
        return len(batch)
    if isinstance(batch, Mapping):
        for v in batch.values():
            n = _first_tensor_size(v)
            if n is not None:
                return n
        return None
    if isinstance(batch, Iterable) and not isinstance(batch, torch.nn.Module):
        for v in batch:
            n = _first_tensor_size(v)
            if n is not None:
                return n
    return None


def parse_num_batches(stage: str, length: int | float, limit: int | float) -> int | float:
    """How many batches of a dataloader of ``length`` a stage uses given ``limit_{stage}_batches``.

    ``length`` may be ``inf`` (no ``__len__``). An int limit caps the count; a float is a fraction.
    """
    if isinstance(limit, int):
        return min(length, limit)
    if length == float("inf"):
        if limit == 1.0:
            return float("inf")
        raise MisconfigurationException(
            f"limit_{stage}_batches={limit!r} is a fraction, but the {stage} dataloader has no length "
            f"(an IterableDataset), so a fraction of it is undefined. Use an int number of batches instead."
        )
    n = int(length * limit)
    if n == 0 and limit > 0.0 and length > 0:
        min_fraction = 1.0 / length
        raise MisconfigurationException(
            f"limit_{stage}_batches={limit!r} of a {stage} dataloader with {int(length)} batches selects "
            f"{length} * {limit} < 1 batch. Use limit_{stage}_batches >= {min_fraction:.4g}, or an int."
        )
    return n

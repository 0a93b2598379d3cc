"""``CombinedLoader``'s members, against Lightning's: ``iterables``, ``flattened`` (settable), ``limits``,
``sampler`` / ``batch_sampler`` in the structure of the iterables, and ``reset``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from fulmen.utilities import CombinedLoader
from tests.parity import oracle


def _loaders() -> tuple[DataLoader, DataLoader]:
    return DataLoader(range(6), batch_size=4), DataLoader(range(15), batch_size=5)


def _structure(value: Any) -> Any:
    """Samplers and loaders by type name, in their container."""
    if isinstance(value, dict):
        return {k: _structure(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_structure(v) for v in value)
    return type(value).__name__


def _members(combined_class: Any) -> dict[str, Any]:
    a, b = _loaders()
    seen: dict[str, Any] = {}
    for name, iterables in (("one", a), ("list", [a, b]), ("tuple", (a, b)), ("dict", {"x": a, "y": b})):
        combined = combined_class(iterables)
        seen[name] = (_structure(combined.sampler), _structure(combined.batch_sampler),
                      combined.iterables is iterables, len(combined.flattened), combined.limits)  # fmt: skip
    combined = combined_class({"x": a, "y": b}, "max_size_cycle")
    combined.flattened = [b, a]
    seen["replaced"] = (list(combined.iterables), combined.iterables["x"] is b, combined.flattened[0] is b)
    for bad in ([a], [a, b, a]):
        with pytest.raises(ValueError, match="Mismatch in flattened length"):
            combined.flattened = bad
    combined.limits = 2
    seen["limits_int"] = combined.limits
    with pytest.raises(ValueError, match=r"Mismatch in number of limits \(1\) and number of iterables \(2\)"):
        combined.limits = [1]
    for mode in ("min_size", "max_size_cycle", "max_size", "sequential"):
        combined = combined_class((a, b), mode)
        combined.limits = [1, 2]
        iter(combined)
        seen[mode] = len(combined)
    combined = combined_class((a, b), "sequential")
    combined.limits = [1, 2]
    seen["sequential_batches"] = [(batch.tolist(), batch_idx, loader_idx) for batch, batch_idx, loader_idx in combined]
    return seen


@oracle.parity
def test_members_as_lightnings():
    ours = _members(CombinedLoader)
    assert ours == _members(oracle.lightning("lightning.pytorch.utilities").CombinedLoader)
    assert ours["dict"][0] == {"x": "SequentialSampler", "y": "SequentialSampler"} and ours["one"][0] == "SequentialSampler"
    assert ours["sequential_batches"] == [([0, 1, 2, 3], 0, 0), ([0, 1, 2, 3, 4], 0, 1), ([5, 6, 7, 8, 9], 1, 1)]


def test_reset_starts_over_and_stops_the_workers():
    loader = DataLoader(torch.arange(8), batch_size=2, num_workers=1, persistent_workers=True)
    combined = CombinedLoader([loader], "max_size")
    iterator = iter(combined)
    batch, batch_idx, dataloader_idx = next(iterator)  # what iterating yields in every mode, as in Lightning
    assert (batch[0].tolist(), batch_idx, dataloader_idx) == ([0, 1], 0, 0)
    assert loader._iterator is not None  # the persistent workers are up
    combined.reset()
    assert loader._iterator is None and list(iterator) == []  # the iteration in progress is over
    assert next(iter(combined))[0][0].tolist() == [0, 1]  # a new one starts from the beginning
    combined.reset()


def test_len_follows_the_limits_and_an_unsized_iterable_without_one_has_none():
    sized, unsized = DataLoader(range(6), batch_size=2), iter(range(100))
    combined = CombinedLoader([sized, unsized], "max_size")
    with pytest.raises(TypeError, match="no length"):
        len(combined)
    combined.limits = [2, 5]
    assert len(combined) == 5


@oracle.parity
def test_iterating_yields_batch_batch_idx_and_dataloader_idx_in_every_mode_and_limits_cut_as_in_lightning():
    from lightning.pytorch.utilities import CombinedLoader as Theirs

    for mode in ("max_size_cycle", "min_size", "max_size", "sequential"):
        for limits in (None, [2, 4]):
            found = []
            for cls in (Theirs, CombinedLoader):
                combined = cls({"a": range(3), "b": range(5)}, mode)
                iter(combined)  # Lightning's length needs an iterator first
                if limits is not None:
                    combined.limits = limits
                found.append((list(combined), len(combined)))
            assert found[1] == found[0], (mode, limits)

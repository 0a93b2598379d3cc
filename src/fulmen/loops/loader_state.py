"""Training data that keeps its own position: loaders, samplers and datasets with ``state_dict()`` /
``load_state_dict()``.

A resumed run must go on from the first sample the interrupted run had not trained on. For a map-style
``DataLoader`` fulmen redraws the epoch's order and skips the batches already done by index (nothing is
loaded twice). A data pipeline that streams (an iterable dataset, a streaming loader) cannot start at a later
batch unless it keeps its own position; when it does, that position is what the checkpoint holds. One rule
per kind of part:

===============================================  ==================================================================
part with ``state_dict()`` / ``load_state_dict``  kept in the checkpoint, and restored
===============================================  ==================================================================
the train loader (torchdata's                     its state after the last batch the loop took, under Lightning's key
``StatefulDataLoader``, litdata's loader, a       ``loops.fit_loop.state_dict.combined_loader`` (one entry per loader
user class), every one of several train loaders   with state, so files move both ways); loaded before the resumed
                                                  epoch's iterator is made: nothing is read again
an iterable dataset in a plain ``DataLoader``     its state after the last batch the loop took, loaded the same way;
loading in the main process (``num_workers=0``)   with workers each worker holds its own copy, which the main process
                                                  cannot read: those batches are replayed (loaded and dropped)
a sampler or batch sampler (map-style data)       its state at the start of the epoch: restored, then the epoch's
                                                  batches already done are skipped by index as usual
a map-style dataset                               its state when the checkpoint was written, loaded before the epoch
===============================================  ==================================================================

The loop reads one batch ahead from a loader without a length (to know which batch is the last); the state it
keeps is the one taken *before* that look-ahead, so the batch read ahead is read again after a resume, not lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fulmen.utilities.combined_loader import CombinedLoader
from fulmen.utilities.data import is_iterable_dataset, is_stateful


@dataclass
class DataParts:
    """The parts of one training loader that keep a state, by the rule each follows (see the module)."""

    loaders: list[Any] = field(default_factory=list)  # stateful train loaders (Lightning's list)
    complete: bool = False  # every train loader has a state: they hold the data position
    dataset: Any = None  # an iterable dataset loading in the main process, holding the position
    samplers: dict[str, Any] = field(default_factory=dict)  # "sampler" / "batch_sampler": epoch-start states
    map_dataset: Any = None  # a map-style dataset with a state

    @property
    def holders(self) -> list[Any]:
        """The parts whose state is the position in the epoch (empty: batches are skipped or replayed)."""
        if self.complete:
            return self.loaders
        return [self.dataset] if self.dataset is not None else []

    def snapshot(self) -> list[Any]:
        return [part.state_dict() for part in self.holders]

    def snapshot_fn(self) -> Callable[[], list[Any]] | None:
        """What the epoch's iterator calls before each read (``None``: nothing to keep, no cost)."""
        return self.snapshot if self.holders else None

    def load_position(self, states: list[Any]) -> None:
        holders = self.holders
        if len(holders) != len(states):
            raise RuntimeError(
                f"The checkpoint holds the states of {len(states)} training dataloader(s) (or dataset), but this "
                f"run's training data has {len(holders)} with `state_dict`/`load_state_dict`. Resume with the "
                "dataloaders the checkpoint was written with."
            )
        for part, state in zip(holders, states):
            part.load_state_dict(state)

    def sampler_states(self) -> dict[str, Any]:
        return {name: part.state_dict() for name, part in self.samplers.items()}

    def load_sampler_states(self, states: dict[str, Any] | None) -> None:
        for name, state in (states or {}).items():
            if name in self.samplers:
                self.samplers[name].load_state_dict(state)


def data_parts(loader: Any) -> DataParts:
    """Which parts of ``loader`` (a DataLoader, a CombinedLoader, any iterable) keep a state."""
    flattened = loader.flattened if isinstance(loader, CombinedLoader) else [loader]
    stateful = [dl for dl in flattened if is_stateful(dl)]
    parts = DataParts(loaders=stateful, complete=bool(stateful) and len(stateful) == len(flattened))
    if parts.complete or len(flattened) != 1:
        return parts
    dataset = getattr(loader, "dataset", None)
    if not is_stateful(dataset):
        dataset = None
    if is_iterable_dataset(loader):
        # in worker processes each worker iterates its own copy: the main process's copy has no position
        if dataset is not None and getattr(loader, "num_workers", 0) == 0:
            parts.dataset = dataset
        return parts
    parts.map_dataset = dataset
    sampler = getattr(loader, "sampler", None)
    batch_sampler = getattr(loader, "batch_sampler", None)
    if is_stateful(sampler):
        parts.samplers["sampler"] = sampler
    if batch_sampler is not None and batch_sampler is not sampler and is_stateful(batch_sampler):
        parts.samplers["batch_sampler"] = batch_sampler
    return parts

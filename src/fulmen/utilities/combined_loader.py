"""Iterate several dataloaders together (a list or dict of them) as one."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from fulmen.utilities.data import has_len, is_stateful
from fulmen.utilities.exceptions import MisconfigurationException

_MODES = ("max_size_cycle", "min_size", "max_size", "sequential")


class CombinedLoader:
    """Combine iterables (list or dict): each batch holds one batch of each, in the same structure.

    Modes: 'max_size_cycle' (default for training: shorter ones restart until the longest ends), 'min_size'
    (stop with the shortest), 'max_size' (exhausted ones yield None), 'sequential' (one after another,
    yielding ``(batch, batch_idx, dataloader_idx)``).
    """

    def __init__(self, iterables: Any, mode: str = "min_size") -> None:
        if mode not in _MODES:
            raise MisconfigurationException(
                f"CombinedLoader(mode={mode!r}) is not supported. Use one of {list(_MODES)}."
            )
        self.iterables = iterables
        self.mode = mode
        if isinstance(iterables, Mapping):
            self._keys: list[Any] | None = list(iterables)
            self._loaders = list(iterables.values())
        elif isinstance(iterables, (list, tuple)):
            self._keys = None
            self._loaders = list(iterables)
        else:
            self._keys = None
            self._loaders = [iterables]

    @property
    def flattened(self) -> list[Any]:
        return list(self._loaders)

    def _state_dicts(self) -> list[dict[str, Any]]:
        """The states of the combined iterables that keep one (what a checkpoint holds of them)."""
        return [loader.state_dict() for loader in self._loaders if is_stateful(loader)]

    def _load_state_dicts(self, states: list[dict[str, Any]]) -> None:
        """Give each iterable that keeps a state its saved one, in order."""
        if not states:
            return
        stateful = [loader for loader in self._loaders if is_stateful(loader)]
        if len(stateful) != len(states):
            raise RuntimeError(
                f"The CombinedLoader has {len(stateful)} iterables with `state_dict`/`load_state_dict`, but the "
                f"checkpoint holds {len(states)} states: combine the dataloaders the checkpoint was written with."
            )
        for loader, state in zip(stateful, states):
            loader.load_state_dict(state)

    def _pack(self, items: list[Any]) -> Any:
        if self._keys is not None:
            return dict(zip(self._keys, items))
        return type(self.iterables)(items) if isinstance(self.iterables, tuple) else items

    def __len__(self) -> int:
        lengths = [len(dl) for dl in self._loaders if has_len(dl)]
        if len(lengths) != len(self._loaders):
            raise TypeError("CombinedLoader has no length: one of its iterables has none.")
        if self.mode in ("max_size_cycle", "max_size"):
            return max(lengths, default=0)
        if self.mode == "min_size":
            return min(lengths, default=0)
        return sum(lengths)

    def __iter__(self) -> Iterator[Any]:
        if self.mode == "sequential":
            for dl_idx, dl in enumerate(self._loaders):
                for batch_idx, batch in enumerate(dl):
                    yield batch, batch_idx, dl_idx
            return
        iterators = [iter(dl) for dl in self._loaders]
        exhausted = [False] * len(iterators)
        while True:
            items = []
            for i, it in enumerate(iterators):
                try:
                    items.append(next(it))
                except StopIteration:
                    exhausted[i] = True
                    if self.mode == "min_size":
                        return
                    if self.mode == "max_size":
                        items.append(None)
                        continue
                    iterators[i] = iter(self._loaders[i])  # max_size_cycle: restart the shorter one
                    if all(exhausted):
                        return
                    items.append(next(iterators[i]))
            if all(exhausted):
                return
            yield self._pack(items)

"""``Profiler``: the interface the Trainer drives (``PassThroughProfiler``, which records nothing, is in
:mod:`fulmen.profilers.base`).

The Trainer calls ``setup(stage, local_rank, log_dir)`` when a run starts, ``start(action)`` /
``stop(action)`` around every hook and loop stage through its hook dispatcher (so each is timed once), and
``describe()`` when the run ends: the report goes to ``<dirpath>/<stage>-<filename>.txt`` (``-<rank>``
added under several processes) when ``filename`` is set, else it is printed on rank zero.
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any

from fulmen.utilities import cloud_io
from fulmen.utilities.cloud_io import get_filesystem as get_filesystem
from fulmen.utilities.rank_zero import rank_zero_info


class Profiler(ABC):
    """Base class: implement ``start`` and ``stop`` (and ``summary`` for a report)."""

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None) -> None:
        cloud_io.check_reachable(dirpath, f"{type(self).__name__}(dirpath)")
        self.dirpath: str | None = cloud_io.local(dirpath) if dirpath is not None else None
        self.filename = filename
        self._stage: str | None = None
        self._local_rank: int | None = None
        self._write: Callable[[str], None] | None = None

    @abstractmethod
    def start(self, action_name: str) -> None:
        """Begin recording ``action_name``."""

    @abstractmethod
    def stop(self, action_name: str) -> None:
        """End recording ``action_name``."""

    def summary(self) -> str:
        return ""

    @contextlib.contextmanager
    def profile(self, action_name: str) -> Generator[str, None, None]:
        """``with profiler.profile("load data"): ...`` records the block under that name."""
        self.start(action_name)
        try:
            yield action_name
        finally:
            self.stop(action_name)

    def profile_iterable(self, iterable: Iterable[Any], action_name: str) -> Iterator[Any]:
        """Yield from ``iterable``, recording each ``next()`` under ``action_name``."""
        iterator = iter(iterable)
        while True:
            self.start(action_name)
            try:
                value = next(iterator)
            except StopIteration:
                self.stop(action_name)
                return
            self.stop(action_name)
            yield value

    # -- the run ---------------------------------------------------------------------------------------
    @property
    def local_rank(self) -> int:
        return 0 if self._local_rank is None else self._local_rank

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """A run of ``stage`` ("fit", "validate", ...) begins; ``local_rank`` is None on one process."""
        self._stage = stage
        self._local_rank = local_rank
        if self.dirpath is None and log_dir is not None:
            self.dirpath = log_dir

    def attach_module(self, module: Any) -> None:
        """The LightningModule being run (the PyTorch profiler names its layers); others ignore it."""

    def describe(self) -> None:
        """Write the summary (to the report file, or printed on rank zero) and end the stage."""
        text = self.summary()
        if text:
            self._stream()(text)
        self.teardown(stage=self._stage)

    def teardown(self, stage: str | None) -> None:
        self._write = None

    # -- output ----------------------------------------------------------------------------------------
    def _prepare_filename(self, action_name: str | None = None, extension: str = ".txt", split_token: str = "-") -> str:
        parts = [self._stage] if self._stage else []
        parts.append(self.filename or "")
        if action_name is not None:
            parts.append(action_name)
        if self._local_rank is not None:
            parts.append(str(self._local_rank))
        return split_token.join(p for p in parts if p) + extension

    def _stream(self) -> Callable[[str], None]:
        if self._write is not None:
            return self._write
        if self.filename and self.dirpath:
            path = cloud_io.join(self.dirpath, self._prepare_filename())

            def append(text: str) -> None:
                if cloud_io.is_remote(path):
                    old = cloud_io.read_bytes(path).decode("utf-8") if cloud_io.exists(path) else ""
                    cloud_io.write_text(path, old + text + "\n")
                    return
                cloud_io.makedirs(cloud_io.dirname(path))
                with open(path, "a", encoding="utf-8") as f:
                    f.write(text + "\n")

            self._write = append
        else:
            self._write = rank_zero_info
        return self._write

    def _stats_to_str(self, stats: dict[str, str]) -> str:
        stage = f"{self._stage.upper()} " if self._stage else ""
        lines = [f"{stage}Profiler Report"]
        for action, value in stats.items():
            header = f"Profile stats for: {action}"
            if self._local_rank is not None:
                header += f" rank: {self._local_rank}"
            lines += [header, value]
        return os.linesep.join(lines)


"""``AdvancedProfiler``: ``cProfile`` per action, reported with ``pstats``."""

from __future__ import annotations

import cProfile
import functools
import io
import marshal
import os
import pstats
from typing import Any

from fulmen.profilers.profiler import Profiler
from fulmen.utilities import cloud_io
from fulmen.utilities.cloud_io import get_filesystem as get_filesystem
from fulmen.utilities.rank_zero import rank_zero_only as rank_zero_only


class AdvancedProfiler(Profiler):
    """A ``cProfile.Profile`` per action: the functions each action spent its time in, sorted by cumulative
    time and cut to ``line_count_restriction`` (a count, or a fraction of the lines). ``dump_stats``: also
    write each action's raw stats to ``<dirpath>/<stage>-<filename>-<action>.prof`` (for snakeviz etc.).

    Only one cProfile may run at a time, so a nested action pauses the enclosing one: an action's profile
    holds the calls made while it was the innermost running action."""

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        line_count_restriction: float = 1.0,
        dump_stats: bool = False,
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.profiled_actions: dict[str, cProfile.Profile] = {}
        self.line_count_restriction = line_count_restriction
        self.dump_stats = dump_stats
        self._running: list[str] = []

    def start(self, action_name: str) -> None:
        if self._running:
            self.profiled_actions[self._running[-1]].disable()
        self._running.append(action_name)
        self.profiled_actions.setdefault(action_name, cProfile.Profile()).enable()

    def stop(self, action_name: str) -> None:
        profile = self.profiled_actions.get(action_name)
        if profile is None or action_name not in self._running:
            raise ValueError(f"Attempting to stop recording an action ({action_name}) which was never started.")
        profile.disable()
        self._running.remove(action_name)
        if self._running:
            self.profiled_actions[self._running[-1]].enable()

    def summary(self) -> str:
        stats: dict[str, str] = {}
        for action, profile in self.profiled_actions.items():
            if self.dump_stats and self.dirpath:
                path = cloud_io.join(self.dirpath, self._prepare_filename(action_name=action, extension=".prof"))
                if cloud_io.is_remote(path):  # dump_stats writes local files: marshal what it would write
                    profile.create_stats()
                    data = marshal.dumps(profile.stats)
                    cloud_io.write_remote(path, functools.partial(_write_bytes, data=data))
                else:
                    cloud_io.makedirs(self.dirpath)
                    profile.dump_stats(path)
            text = io.StringIO()
            pstats.Stats(profile, stream=text).strip_dirs().sort_stats("cumulative").print_stats(
                self.line_count_restriction
            )
            stats[action] = text.getvalue()
        return self._stats_to_str(stats) if stats else ""

    def teardown(self, stage: str | None) -> None:
        super().teardown(stage)
        for action in reversed(self._running):
            self.profiled_actions[action].disable()
        self._running.clear()
        self.profiled_actions = {}


def _write_bytes(f: Any, data: bytes) -> None:
    f.write(data)

"""``SimpleProfiler``: wall-clock time of every action, as a table sorted by total time."""

from __future__ import annotations

import math
import os
import time
from collections import defaultdict

from fulmen.profilers.profiler import Profiler


class SimpleProfiler(Profiler):
    """Times each action with ``time.monotonic``. ``extended``: mean, number of calls, total and share of the
    run's time per action (else mean and total only)."""

    def __init__(
        self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None, extended: bool = True
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        self.current_actions: dict[str, float] = {}
        self.recorded_durations: defaultdict[str, list[float]] = defaultdict(list)
        self.extended = extended
        self.start_time = time.monotonic()

    def start(self, action_name: str) -> None:
        if action_name in self.current_actions:
            raise ValueError(f"Attempted to start {action_name} which has already started.")
        self.current_actions[action_name] = time.monotonic()

    def stop(self, action_name: str) -> None:
        end = time.monotonic()
        started = self.current_actions.pop(action_name, None)
        if started is None:
            raise ValueError(f"Attempting to stop recording an action ({action_name}) which was never started.")
        self.recorded_durations[action_name].append(end - started)

    def summary(self) -> str:
        if not self.recorded_durations:
            return ""
        stage = f"{self._stage.upper()} " if self._stage else ""
        rows = sorted(
            # math.fsum: many short durations add up without the rounding a running float sum accumulates
            ((name, math.fsum(d), len(d)) for name, d in self.recorded_durations.items()),
            key=lambda r: r[1], reverse=True,
        )
        header: tuple[str, ...]
        body: list[tuple[str, ...]]
        if self.extended:
            elapsed = time.monotonic() - self.start_time
            header = ("Action", "Mean duration (s)", "Num calls", "Total time (s)", "Percentage %")
            body = [("Total", "-", str(sum(n for _, _, n in rows)), f"{elapsed:.5}", "100 %")]
            body += [(name, f"{total / n:.5}", str(n), f"{total:.5}", f"{100 * total / elapsed:.5}")
                     for name, total, n in rows]  # fmt: skip
        else:
            header = ("Action", "Mean duration (s)", "Total time (s)")
            body = [(name, f"{total / n:.5}", f"{total:.5}") for name, total, n in rows]
        return f"{stage}Profiler Report{os.linesep}{os.linesep}{_table(header, body)}"


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        return "|  " + "  |  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  |"

    rule = "-" * len(line(header))
    out = [rule, line(header), rule]
    for i, row in enumerate(rows):
        out.append(line(row))
        if i == 0 and row[0] == "Total":
            out.append(rule)
    out.append(rule)
    return os.linesep.join(out)

"""A hung process becomes an error: the hang watchdog of a run on several processes.

A rank that dies, or stops entering collectives, leaves the others waiting inside one. torch's process-group
timeout (30 minutes by default) ends that wait only on the ranks that wait in a collective, says nothing about
where each rank was, and never ends a rank stuck in its own code. The watchdog is a daemon thread in each
process that looks, once a second, at a progress count the run advances anyway (batches trained and
evaluated, checkpoints written, collectives completed). When it has not moved for ``timeout`` seconds, the
thread prints which rank it is, where the run was (stage, epoch, batch, the collective it is in) and every
thread's Python stack (``faulthandler``), then ends the process with status 1: the launcher (fulmen's,
torchrun, SLURM) then ends the job, or restarts it from its last checkpoint.

Reading the count costs the training loop nothing; the thread wakes once a second.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Hashable, Iterator

EXIT_CODE = 1


class HangWatchdog:
    """Ends this process when ``progress()`` has returned the same value for ``timeout`` seconds.

    ``where()`` says where the run is, for the report. ``poll`` (seconds) is how often the thread looks.
    """

    def __init__(
        self, timeout: float, progress: Callable[[], Hashable], where: Callable[[], str], name: str,
        poll: float = 1.0,
    ) -> None:  # fmt: skip
        if timeout <= 0:
            raise ValueError(f"HangWatchdog(timeout={timeout!r}): the limit must be a positive number of seconds.")
        self.timeout, self.poll = timeout, min(poll, timeout / 4)
        self._progress, self._where, self.name = progress, where, name
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._paused = 0  # inside paused() blocks: the clock restarts when the last one ends

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stopped.clear()
        self._thread = threading.Thread(target=self._watch, name="fulmen-hang-watchdog", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """A block that may take any time without progress (the user's data preparation): not counted."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def _watch(self) -> None:
        last, since = self._progress(), time.monotonic()
        while not self._stopped.wait(self.poll):
            now, seen = time.monotonic(), self._progress()
            if seen != last or self._paused:
                last, since = seen, now
            elif now - since >= self.timeout:
                self._report(now - since)
                os._exit(EXIT_CODE)  # the main thread is stuck: nothing else can end the process

    def _report(self, waited: float) -> None:
        try:
            where = self._where()
        except Exception as error:  # the report must not fail because the run's state is half-changed
            where = f"(could not say where: {error!r})"
        header = (
            f"fulmen: {self.name} made no progress for {waited:.0f} s (the limit is {self.timeout:g} s): {where}. "
            "A rank that stopped entering collectives, or died, leaves the others waiting: look for the rank "
            "whose stack below is not inside a collective. Every thread's Python stack follows; the process "
            f"ends with status {EXIT_CODE}.\n"
        )
        # the stacks go to a file first, then out in one write with the header: the ranks of a job often share
        # one terminal or log, where reports written piece by piece interleave
        with tempfile.TemporaryFile() as stacks:
            faulthandler.dump_traceback(file=stacks, all_threads=True)
            stacks.seek(0)
            report = header.encode() + stacks.read()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            os.write(sys.stderr.fileno(), report)
        except (AttributeError, OSError, ValueError):  # stderr replaced by an object without a descriptor
            sys.stderr.write(report.decode(errors="replace"))
            sys.stderr.flush()

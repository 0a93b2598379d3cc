"""Multi-process jobs that module fixtures need, started in the background once the tests are collected.

The suite's process trains on one thread (``tests/conftest.py``), so while the single-process tests run, the
second core of the CI machine is idle. A module registers the launches its fixture needs (``register``); when
the collected tests include that module, ``plan`` notes them and ``start`` runs them one after another on a
background thread, which only waits on their processes (``tests/conftest.py`` says when); the fixture then takes the
result (``result``), waiting for it if it is not there yet, or running it itself when nothing started it
(a single test run alone). A job that failed raises its error in the fixture, as if the fixture had run it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

_JOBS: dict[str, tuple[str, Callable[[Path, dict[str, str]], Any]]] = {}  # key -> (module, job(folder, environ))
_STARTED: dict[str, Future[Any]] = {}
_FOLDERS: list[Path] = []
_EXECUTOR: ThreadPoolExecutor | None = None


def register(key: str, module: str, job: Callable[[Path, dict[str, str]], Any]) -> None:
    """``job(folder, environ)``, which the fixtures of ``module`` need: ``folder`` is a fresh directory of its own
    (also the working directory its processes should get), ``environ`` the variables its processes start from:
    those of the session when the job starts in the background (a test running meanwhile may have changed
    ``os.environ``), else the current ones."""
    _JOBS[key] = (module, job)


_PLANNED: set[str] = set()


def plan(modules: set[str]) -> None:
    """The jobs of ``modules`` are to run: :func:`start` starts them."""
    _PLANNED.update(modules)


def start() -> None:
    """Start the planned jobs (in the order registered), one at a time in the background."""
    global _EXECUTOR
    for key, (module, job) in _JOBS.items():
        if module in _PLANNED and key not in _STARTED:
            if _EXECUTOR is None:
                _EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
            _STARTED[key] = _EXECUTOR.submit(job, _folder(key), dict(os.environ))


def result(key: str) -> Any:
    """The job's result: from the background run, or run now when none started it."""
    started = _STARTED.get(key)
    if started is not None:
        return started.result()
    return _JOBS[key][1](_folder(key), dict(os.environ))


def stop() -> None:
    """At the end of the session: wait for what is still running, then remove the jobs' folders."""
    if _EXECUTOR is not None:
        _EXECUTOR.shutdown(wait=True, cancel_futures=True)
    for folder in _FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)


def _folder(key: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=f"fulmen-{key}-"))
    _FOLDERS.append(folder)
    return folder

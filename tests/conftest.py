import os
import signal
import warnings

import pytest
import torch

# one thread: deterministic, and fair to the 2-core CI machine
torch.set_num_threads(1)
os.environ.setdefault("PYTHONHASHSEED", "0")
warnings.filterwarnings("ignore", message=".*does not have many workers.*")
warnings.filterwarnings("ignore", message=".*num_workers=0.*")

# The Ctrl-C tests rely on Python's own SIGINT handling (a KeyboardInterrupt), here and in the processes they
# start. A shell that starts the suite with SIGINT ignored (a background job, `nohup`-style runners) hands
# SIG_IGN down instead: set the handling the tests rely on. A child process then starts with the default
# disposition (a caught signal is reset by exec; an ignored one would stay ignored).
signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _isolate_cwd(tmp_path, monkeypatch):
    """Runs write their logs under a fresh directory, never the repository."""
    monkeypatch.chdir(tmp_path)
    yield


def pytest_terminal_summary(terminalreporter):
    """The public-API walk's three counts (tests/compat/test_api_walk.py), when it ran."""
    walk = __import__("sys").modules.get("tests.compat.test_api_walk")
    for line in getattr(walk, "COUNTS", []):
        terminalreporter.write_line(f"Lightning 2.6.6 public API in fulmen: {line}")


def _freeze_survivors() -> None:
    import gc

    gc.collect()
    gc.freeze()


# young-generation collections every 20,000 allocations rather than 700: the tests allocate millions of short-lived
# objects (tensors' Python wrappers, hook records) that reference counting frees anyway; measured here, the
# collector's time in the fast tier fell from about 4 s to about 1 s (the suite's process only)
__import__("gc").set_threshold(20_000, 20, 20)


def pytest_collection_finish(session):
    """The suite's process holds a large heap once the tests are collected (torch, Lightning, the loggers'
    packages), and it lives until the end: moved out of the garbage collector's sight (``gc.freeze``), so that
    each automatic full collection walks only what the tests made since (it walked everything: a second and
    more per collection late in the suite). What the tests make is collected as before.

    Then the multi-process jobs that the selected tests' module fixtures need are planned (``tests/prefetch.py``):
    they run in the background, on the core this one-thread process leaves idle, from the first test past
    ``_HOLD`` (see :func:`pytest_runtest_setup`)."""
    _freeze_survivors()
    from tests import prefetch

    modules = {item.module.__name__ for item in session.items if item.module is not None}
    prefetch.plan(modules)
    global _held
    _held = any(m.startswith(_HOLD) for m in modules)


# the packages whose tests kill and time processes (resumes after SIGKILL at random moments, saves cut short):
# they come first in the suite, keep both cores busy, and extra load only slows them, so the background jobs start
# after them
_HOLD = "tests.checkpointing"
_held = False  # the session's tests include that package, and the run has not reached it yet


def pytest_runtest_setup(item):
    global _held
    module = item.module.__name__ if item.module is not None else ""
    if module.startswith(_HOLD):
        _held = False  # reached: the jobs start with the first test after it
    elif not _held:
        from tests import prefetch

        prefetch.start()


def pytest_sessionfinish(session, exitstatus):
    from tests import prefetch

    prefetch.stop()


@pytest.hookimpl(trylast=True)  # after the module's fixtures were finalized
def pytest_runtest_teardown(item, nextitem):
    """The same after each test module: what survives it (caches, imported modules) stays to the end."""
    if nextitem is None or nextitem.module is not item.module:
        _freeze_survivors()

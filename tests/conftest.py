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

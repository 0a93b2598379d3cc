"""Questions the processes of a run answer together, through their strategy's collectives."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fulmen.utilities.cloud_io import is_remote, local

if TYPE_CHECKING:
    from fulmen.strategies.strategy import Strategy

_CHECK_FILE = ".lightning_shared_fs_check"


def is_shared_filesystem(strategy: Strategy, path: str | os.PathLike[str] | None = None, timeout: int = 3) -> bool:
    """Whether every process of ``strategy`` sees the same files under ``path`` (default: the working directory),
    e.g. to decide whether each node must write its own copy of a checkpoint.

    A remote path (``s3://`` ...) and a run of one process count as shared. Otherwise all processes must reach
    this call: rank 0 creates a marker file in the folder and the others look for it for up to ``timeout``
    seconds; it is shared when all of them found it. The folder must exist everywhere and be writable on rank 0.
    """
    if path is not None and is_remote(path):
        return True
    folder = Path(local(path) if path is not None else Path.cwd()).resolve()
    if getattr(strategy, "world_size", 1) == 1:
        return True
    # a path that resolves differently on some process cannot be one shared folder
    if not strategy.reduce_boolean_decision(strategy.broadcast(folder) == folder, all=True):
        return False
    if not strategy.reduce_boolean_decision(folder.exists(), all=True):
        raise FileNotFoundError(
            f"Unable to determine if the path belongs to a shared filesystem. The path does not exist: {folder} "
            "(on at least one process). Pass a folder that exists on every node, e.g. the run's root directory."
        )
    if folder.is_file():
        folder = folder.parent
    marker = folder / _CHECK_FILE
    marker.unlink(missing_ok=True)  # left over from a check that was cut short
    strategy.barrier()
    if strategy.is_global_zero:
        marker.touch()
        found = True
    else:
        deadline = time.perf_counter() + timeout
        found = marker.exists()
        while not found and time.perf_counter() < deadline:
            time.sleep(0.01)
            found = marker.exists()
    strategy.barrier()
    shared = strategy.reduce_boolean_decision(found, all=True)
    with contextlib.suppress(OSError):  # another process on the same disk may have removed it first
        marker.unlink()
    return shared

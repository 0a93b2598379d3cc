"""The script launcher: on one machine without torchrun or SLURM, this process becomes local rank 0 and the
user's script is run again for ranks 1..devices-1, with the environment torchrun would have set."""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from fulmen.strategies.launchers.launcher import _Launcher
from fulmen.utilities.cluster_layout import LAUNCHER_VARIABLE, detect
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _HYDRA_AVAILABLE as _HYDRA_AVAILABLE
from fulmen.utilities.imports import RequirementCache as RequirementCache
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases


def _script_command() -> list[str]:
    """The command that started this process, to start it again for the other local ranks."""
    import __main__

    spec = getattr(__main__, "__spec__", None)
    module = spec.name.removesuffix(".__main__") if spec is not None and spec.name else None
    script = getattr(__main__, "__file__", None)
    runner = (module or os.path.basename(sys.argv[0] if sys.argv else "")).split(".")[0]
    if runner in _NOT_SCRIPTS or (module is None and (script is None or not os.path.isfile(script))):
        raise MisconfigurationException(
            "strategy='ddp' starts the other processes by running this script again, but this process was not "
            "started from a script (an interactive session, a notebook or a test runner). Run a script, or "
            "launch with torchrun: `torchrun --nproc_per_node=<devices> train.py`."
        )
    if module is not None and module != "__main__":  # python -m package.module
        return [sys.executable, "-m", module, *sys.argv[1:]]
    assert script is not None
    return [sys.executable, os.path.abspath(script), *sys.argv[1:]]


# entry points that are not the user's script: running them again would not reach the user's fit()
_NOT_SCRIPTS = frozenset({"pytest", "py", "_pytest", "ipykernel_launcher", "ipykernel", "IPython", "ipython",
                          "jupyter", "pydevconsole"})  # fmt: skip


def launch_local_ranks(devices: int) -> list[subprocess.Popen[bytes]]:
    """Start the script again for local ranks 1..devices-1 (one node); this process becomes rank 0."""
    command = _script_command()
    port = os.environ.get("MASTER_PORT") or str(free_port())
    common = {"MASTER_ADDR": os.environ.get("MASTER_ADDR", "127.0.0.1"), "MASTER_PORT": port,
              "WORLD_SIZE": str(devices), "LOCAL_WORLD_SIZE": str(devices), "GROUP_RANK": "0",
              LAUNCHER_VARIABLE: "fulmen"}  # fmt: skip
    children = []
    for rank in range(1, devices):
        env = {**os.environ, **common, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        children.append(subprocess.Popen(command, env=env))
    os.environ.update({**common, "RANK": "0", "LOCAL_RANK": "0"})
    atexit.register(_wait_for, children)  # the job ends when every rank has
    return children


def _wait_for(children: list[subprocess.Popen[bytes]]) -> None:
    for child in children:
        child.wait()
    for line in ended_children(children):
        if line not in REPORTED:
            print(f"fulmen: {line}", file=sys.stderr, flush=True)


REPORTED: set[str] = set()  # children's ends already told in a rank's error message


def ended_children(children: list[subprocess.Popen[bytes]]) -> list[str]:
    """What the local ranks this process started and that already failed died of."""
    ended = []
    for rank, child in enumerate(children, start=1):
        code = child.poll()
        if code is None or code == 0:
            continue
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        ended.append(f"rank {rank} (pid {child.pid}) {how}")
    return ended


@contextlib.contextmanager
def ending_if_a_child_dies(children: list[subprocess.Popen[bytes]], poll_s: float = 0.2) -> Iterator[None]:
    """End this process (rank 0) if a local rank it started dies inside the block.

    The process-group rendezvous waits for every rank: a rank that failed before joining (a wrong flag in the
    script, an import error) would leave rank 0 waiting for the whole rendezvous timeout. A thread watches the
    children while the block runs and, when one has ended, says which and ends the job with status 1 (the
    waiting call cannot be interrupted from Python; nothing has run yet that a user could lose).
    """
    done = threading.Event()

    def watch() -> None:
        while not done.wait(poll_s):
            dead = ended_children(children)
            if dead and not done.is_set():
                print(f"fulmen: {'; '.join(dead)} before joining the process group; ending the job",
                      file=sys.stderr, flush=True)  # fmt: skip
                for child in children:
                    if child.poll() is None:
                        child.kill()
                os._exit(1)

    watcher = threading.Thread(target=watch, name="fulmen-rendezvous-watch", daemon=True)
    if children:
        watcher.start()
    try:
        yield
    finally:
        done.set()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _SubprocessScriptLauncher(_Launcher):
    """Starts ``num_processes - 1`` copies of the running script on this machine (local ranks 1..n-1), unless
    ``cluster_environment`` says a launcher (torchrun, srun) started the processes already; then runs the stage
    here, as local rank 0. ``cluster_environment``: a cluster-environment plugin, or ``None`` to read the
    launcher's variables from the environment."""

    def __init__(self, cluster_environment: Any, num_processes: int, num_nodes: int) -> None:
        self.cluster_environment = cluster_environment
        self.num_processes = num_processes
        self.num_nodes = num_nodes
        self.procs: list[subprocess.Popen[bytes]] = []  # the local ranks started here (not this process)

    @property
    def is_interactive_compatible(self) -> bool:
        return False  # it runs the script again: a notebook has none

    def launch(self, function: Callable[..., Any], *args: Any, trainer: Any = None, **kwargs: Any) -> Any:
        self.start_children()
        return function(*args, **kwargs)

    def start_children(self) -> None:
        """Start the other local ranks, once, when no launcher started them (a tuner run before fit may ask
        first, fit again later: the second call finds them started)."""
        if self.procs or self.processes_exist():
            return
        if self.num_nodes > 1:
            raise MisconfigurationException(
                f"num_nodes={self.num_nodes}: fulmen starts processes on one machine only. Start them on every "
                "machine with torchrun or SLURM's srun."
            )
        self.procs = launch_local_ranks(self.num_processes)

    def processes_exist(self) -> bool:
        """Whether a launcher (or this launcher, earlier) started the ranks already."""
        environment = self.cluster_environment
        if environment is None:
            return detect() is not None
        layout = getattr(environment, "layout", None)
        if layout is None:  # an environment that only says whether something else starts the processes
            return bool(environment.creates_processes_externally)
        return layout() is not None

    def kill(self, signum: int) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signum)


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "ClusterEnvironment": "fulmen.plugins.environments.ClusterEnvironment",
})  # fmt: skip

"""``ClusterEnvironment``: the base of every cluster environment, and the reading of Lightning's rank methods.

An environment describes its launcher with :meth:`ClusterEnvironment.layout`; one written for Lightning implements
Lightning's methods (``world_size()``, ``global_rank()`` ...) instead, and its layout is made from them here.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from typing import Any

from fulmen.utilities.cluster_layout import ClusterLayout, torchrun_layout
from fulmen.utilities.exceptions import MisconfigurationException

log = logging.getLogger(__name__)

# Lightning's interface: what fulmen calls on an environment that does not describe itself with `layout()`
_RANK_METHODS = ("world_size", "global_rank", "local_rank", "node_rank", "main_address", "main_port")
_INTERFACE = (*_RANK_METHODS, "creates_processes_externally", "detect", "set_world_size", "set_global_rank")


class ClusterEnvironment(ABC):
    """What a launcher tells each process.

    ``layout()`` is what fulmen's strategies read (None: no launcher started this process; fulmen starts the
    local ranks itself). fulmen's environments implement it; a subclass may implement Lightning's methods
    instead (``world_size()``, ``global_rank()``, and ``local_rank()``, ``node_rank()``, ``main_address``,
    ``main_port`` where the defaults, 0 and ``MASTER_ADDR`` / ``MASTER_PORT``, do not fit), and the layout is
    made from them.
    """

    _expected: tuple[int, int] | None = None  # (devices, num_nodes) of the run, once the Trainer knows them

    @property
    @abstractmethod
    def creates_processes_externally(self) -> bool:
        """Whether the processes are started by something else than fulmen (torchrun, srun)."""

    @staticmethod
    @abstractmethod
    def detect() -> bool:
        """Whether this process runs in this environment."""

    def layout(self) -> ClusterLayout | None:
        """The ranks, sizes and rendezvous address; None when fulmen is to start the processes.

        This default reads Lightning's methods (see the class docstring)."""
        missing = [name for name in ("world_size", "global_rank") if not _overrides(self, name)]
        if missing:
            raise NotImplementedError(
                f"{type(self).__name__} describes no launcher: implement layout(), or Lightning's "
                f"{' and '.join(f'{name}()' for name in missing)} (with local_rank(), node_rank(), main_address "
                "and main_port where the defaults do not fit)."
            )
        return _layout_from_methods(self, self)

    def required_layout(self, processes: int = 2) -> ClusterLayout | None:
        """``layout()``, refused when the plugin names a launcher that did not start this process and the run
        asks for several ``processes``. A one-process run has no ranks to read: a script that always passes the
        plugin (a SLURM job's) also runs on a workstation, on its one device."""
        if processes == 1 and self.creates_processes_externally and not _detected(self):
            return None
        name = type(self._given()).__name__
        try:
            layout = self.layout()
        except (KeyError, ValueError) as err:  # a launcher variable missing or malformed: the exception kept
            raise type(err)(
                f"Trainer(plugins=[{name}()]): reading the ranks failed ({err}); this process was "
                "not started by that launcher, or not as it expects. Start the script with it, or drop the plugin."
            ) from err
        if layout is None and self.creates_processes_externally and not _detected(self):
            raise MisconfigurationException(
                f"Trainer(plugins=[{name}()]): this process was not started by that launcher (its "
                "environment variables are missing). Start the script with it, or drop the plugin."
            )
        return layout

    def _given(self) -> object:
        """The object the user gave for this environment: itself (the adapter of a Lightning object answers
        that object, so messages name the user's class)."""
        return self

    def expect_processes(self, num_devices: int, num_nodes: int) -> None:
        """The Trainer's devices per node and nodes, told before the layout is read: an environment whose ranks
        are not fixed by its launcher gets its world size and rank from them (see :meth:`layout`)."""
        self._expected = (num_devices, num_nodes)

    @property
    def main_address(self) -> str:
        if _overrides(self, "layout"):
            layout = self.layout()
            if layout is not None:
                return layout.master_addr
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        if _overrides(self, "layout"):
            layout = self.layout()
            if layout is not None and layout.master_port is not None:
                return layout.master_port
        return int(os.environ.get("MASTER_PORT", 0))

    def world_size(self) -> int:
        layout = self._own_layout()
        return layout.world_size if layout is not None else 1

    def global_rank(self) -> int:
        layout = self._own_layout()
        return layout.global_rank if layout is not None else 0

    def local_rank(self) -> int:
        layout = self._own_layout()
        return layout.local_rank if layout is not None else 0

    def node_rank(self) -> int:
        layout = self._own_layout()
        return layout.node_rank if layout is not None else 0

    def _own_layout(self) -> ClusterLayout | None:
        """The layout, when a subclass describes itself with one (the methods above then read it)."""
        return self.layout() if _overrides(self, "layout") else None

    def set_world_size(self, size: int) -> None:
        """Fixed by the launcher; kept for Lightning's interface."""
        log.debug(f"{type(self).__name__}.set_world_size({size}) ignored: the launcher fixes the world size.")

    def set_global_rank(self, rank: int) -> None:
        """Fixed by the launcher; kept for Lightning's interface."""
        log.debug(f"{type(self).__name__}.set_global_rank({rank}) ignored: the launcher fixes the rank.")

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Check the Trainer's devices / num_nodes against the launcher (the DDP strategy does this too)."""

    def teardown(self) -> None:
        pass


def _overrides(env: object, name: str) -> bool:
    return getattr(type(env), name, None) is not getattr(ClusterEnvironment, name, None)


def _detected(env: ClusterEnvironment) -> bool:
    try:
        return env.detect()
    except NotImplementedError:  # an environment that cannot tell (Kubeflow): it did not start this process
        return False


def _layout_from_methods(env: Any, owner: ClusterEnvironment) -> ClusterLayout | None:
    """A layout from Lightning's methods of ``env`` (``owner`` is the fulmen environment standing for it).

    - Started by fulmen's own launcher: that layout, told to ``env`` (``set_world_size`` / ``set_global_rank``),
      as Lightning's strategies tell it the ranks they start.
    - Not started externally: None, fulmen starts the processes.
    - Otherwise the environment's ranks; an environment whose ranks are not fixed (``set_*`` take effect) gets
      them from the Trainer's devices and nodes first, as in Lightning.
    """
    launched = torchrun_layout()
    if launched is not None and launched.launcher != "torchrun":
        env.set_world_size(launched.world_size)
        env.set_global_rank(launched.global_rank)
        return launched
    if not env.creates_processes_externally:
        return None
    local_rank = _method(env, "local_rank", 0)
    node_rank = _method(env, "node_rank", 0)
    devices = owner._expected[0] if owner._expected else int(os.environ.get("LOCAL_WORLD_SIZE", 0)) or None
    if devices is not None and owner._expected is not None:
        env.set_global_rank(node_rank * devices + local_rank)
        env.set_world_size(owner._expected[1] * devices)
    world_size = env.world_size()
    return ClusterLayout(
        launcher=type(env).__name__, world_size=world_size, global_rank=env.global_rank(), local_rank=local_rank,
        node_rank=node_rank, local_world_size=devices or world_size, master_addr=str(env.main_address),
        master_port=int(env.main_port),
    )  # fmt: skip


def _method(env: Any, name: str, default: int) -> int:
    """``env.name()`` where the environment has its own, else ``default`` (fulmen's base would recurse)."""
    return int(getattr(env, name)()) if _overrides(env, name) else default

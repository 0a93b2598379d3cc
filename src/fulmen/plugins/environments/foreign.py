"""Lightning's environment objects (Lightning Fabric's, or subclasses of its base) seen as fulmen's
``ClusterEnvironment``: the adapter, and telling such an object from anything else."""

from __future__ import annotations

from typing import Any

from fulmen.plugins._interop import implements_foreign_base
from fulmen.plugins.environments.cluster_environment import (
    _INTERFACE,
    ClusterEnvironment,
    _layout_from_methods,
)
from fulmen.utilities.cluster_layout import ClusterLayout


class _WrappedEnvironment(ClusterEnvironment):
    """A Lightning (Fabric) environment object seen as a fulmen one: every method is the wrapped object's, and
    other attributes (``auto_requeue``, ``job_id`` ...) are read from it too. ``environment`` is the object."""

    def __init__(self, environment: Any) -> None:
        self.environment = environment
        self.detect = environment.detect  # type: ignore[method-assign]  # the object's own, not the class's

    def __getattr__(self, name: str) -> Any:
        if name == "environment":  # not set yet (unpickling): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self.environment, name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.environment!r})"

    def _given(self) -> object:
        return self.environment

    @property
    def creates_processes_externally(self) -> bool:
        return bool(self.environment.creates_processes_externally)

    @staticmethod
    def detect() -> bool:  # replaced per instance by the wrapped object's (see __init__)
        return True

    def layout(self) -> ClusterLayout | None:
        return _layout_from_methods(self.environment, self)

    @property
    def main_address(self) -> str:
        return str(self.environment.main_address)

    @property
    def main_port(self) -> int:
        return int(self.environment.main_port)

    def world_size(self) -> int:
        return int(self.environment.world_size())

    def global_rank(self) -> int:
        return int(self.environment.global_rank())

    def local_rank(self) -> int:
        return int(self.environment.local_rank())

    def node_rank(self) -> int:
        return int(self.environment.node_rank())

    def set_world_size(self, size: int) -> None:
        self.environment.set_world_size(size)

    def set_global_rank(self, rank: int) -> None:
        self.environment.set_global_rank(rank)

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        self.environment.validate_settings(num_devices=num_devices, num_nodes=num_nodes)

    def teardown(self) -> None:
        self.environment.teardown()


def is_foreign_environment(obj: object) -> bool:
    """Whether ``obj`` is a cluster environment written for Lightning (Fabric's, or a subclass of its base)."""
    return not isinstance(obj, ClusterEnvironment) and implements_foreign_base(type(obj), "ClusterEnvironment", _INTERFACE)


def as_cluster_environment(obj: object) -> ClusterEnvironment | None:
    """``obj`` as fulmen's ``ClusterEnvironment``: itself, a Lightning (Fabric) environment wrapped, or None for
    anything else."""
    if isinstance(obj, ClusterEnvironment):
        return obj
    if is_foreign_environment(obj):
        return _WrappedEnvironment(obj)
    return None


def user_environment(env: ClusterEnvironment) -> object:
    """The object the user gave for ``env``: a Lightning (Fabric) environment is unwrapped, so that
    ``strategy.cluster_environment`` is what the user passed (``isinstance`` checks against their class hold)."""
    return env.environment if isinstance(env, _WrappedEnvironment) else env

"""``XLAEnvironment``: a TPU pod's processes, which fulmen does not run (it refuses with what to use instead)."""

from __future__ import annotations

from typing import Any

from fulmen.plugins._unavailable import XLA_INSTEAD, refuse, require_package
from fulmen.plugins.environments.cluster_environment import ClusterEnvironment
from fulmen.utilities.cluster_layout import ClusterLayout


class XLAEnvironment(ClusterEnvironment):
    """A TPU pod's processes (``torch_xla``). fulmen does not train on XLA devices: without ``torch_xla`` it
    cannot be made (as in Lightning); with it, reading the ranks refuses with what to use instead."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        require_package("torch_xla", "torch_xla>=1.13", "XLAEnvironment", XLA_INSTEAD)
        super().__init__(*args, **kwargs)

    @property
    def creates_processes_externally(self) -> bool:
        return False

    @staticmethod
    def detect() -> bool:
        return False  # fulmen has no XLA accelerator: never the environment of a fulmen run

    def layout(self) -> ClusterLayout | None:
        refuse("XLAEnvironment (TPU pods)", XLA_INSTEAD)

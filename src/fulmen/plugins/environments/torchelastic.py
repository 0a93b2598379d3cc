"""``TorchElasticEnvironment``: processes started by ``torchrun``."""

from __future__ import annotations

import os

from fulmen.plugins.environments.cluster_environment import ClusterEnvironment
from fulmen.utilities.cluster_layout import ClusterLayout, torchrun_layout


class TorchElasticEnvironment(ClusterEnvironment):
    """Processes started by ``torchrun`` (torch elastic): ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` ..."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @staticmethod
    def detect() -> bool:
        return all(key in os.environ for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))

    def layout(self) -> ClusterLayout | None:
        return torchrun_layout()

"""``LightningEnvironment``: fulmen starts the processes on this machine itself."""

from __future__ import annotations

import os

from fulmen.plugins.environments.cluster_environment import ClusterEnvironment
from fulmen.utilities.cluster_layout import ClusterLayout, torchrun_layout
from fulmen.utilities.rank_zero import rank_zero_only


class LightningEnvironment(ClusterEnvironment):
    """fulmen starts the processes on this machine itself; a launcher's variables (for instance those of an
    interactive SLURM allocation) are ignored, except the ranks fulmen's own launcher sets for the others.
    ``set_world_size`` / ``set_global_rank`` take effect, as the strategy's plan of the processes."""

    def __init__(self) -> None:
        self._world_size: int | None = None
        self._global_rank: int | None = None

    @property
    def creates_processes_externally(self) -> bool:
        return "LOCAL_RANK" in os.environ and os.environ.get("FULMEN_LAUNCHER") is None

    @staticmethod
    def detect() -> bool:
        return True

    def layout(self) -> ClusterLayout | None:
        layout = torchrun_layout()  # the local ranks fulmen started carry torchrun's variables
        return layout if layout is not None and layout.launcher != "torchrun" else None

    def world_size(self) -> int:
        return self._world_size if self._world_size is not None else super().world_size()

    def set_world_size(self, size: int) -> None:
        self._world_size = size

    def global_rank(self) -> int:
        return self._global_rank if self._global_rank is not None else super().global_rank()

    def set_global_rank(self, rank: int) -> None:
        self._global_rank = rank
        rank_zero_only.rank = rank  # type: ignore[attr-defined]  # rank-zero-only output follows the plan

    def local_rank(self) -> int:
        return int(os.environ.get("LOCAL_RANK", 0))

    def node_rank(self) -> int:
        return int(os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", 0)))

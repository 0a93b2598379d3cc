"""``KubeflowEnvironment``: the pods of a Kubeflow ``PyTorchJob``."""

from __future__ import annotations

import os

from fulmen.plugins.environments.cluster_environment import ClusterEnvironment
from fulmen.utilities.cluster_layout import ClusterLayout


class KubeflowEnvironment(ClusterEnvironment):
    """A Kubeflow ``PyTorchJob``: one process per pod, ranked by the operator's ``WORLD_SIZE`` / ``RANK`` /
    ``MASTER_ADDR`` / ``MASTER_PORT``. It cannot be detected (torchrun sets the same variables): name it in
    ``Trainer(plugins=[KubeflowEnvironment()])``."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @staticmethod
    def detect() -> bool:
        raise NotImplementedError(
            "KubeflowEnvironment cannot be detected (its variables are torchrun's too): pass it in "
            "Trainer(plugins=[KubeflowEnvironment()])."
        )

    @property
    def main_address(self) -> str:
        return os.environ["MASTER_ADDR"]

    @property
    def main_port(self) -> int:
        return int(os.environ["MASTER_PORT"])

    def world_size(self) -> int:
        return int(os.environ["WORLD_SIZE"])

    def global_rank(self) -> int:
        return int(os.environ["RANK"])

    def local_rank(self) -> int:
        return 0  # one process per pod

    def node_rank(self) -> int:
        return self.global_rank()  # each pod is a node

    def layout(self) -> ClusterLayout | None:
        if not all(key in os.environ for key in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT")):
            return None
        rank = self.global_rank()
        return ClusterLayout(
            launcher="kubeflow", world_size=self.world_size(), global_rank=rank, local_rank=0, node_rank=rank,
            local_world_size=1, master_addr=self.main_address, master_port=self.main_port,
        )  # fmt: skip

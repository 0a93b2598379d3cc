"""Which environment stands for a process whose launcher the user did not name (the strategy's
``cluster_environment``); whether a launcher started it at all is read in :mod:`.layout`."""

from __future__ import annotations

from fulmen.plugins.environments.cluster_environment import ClusterEnvironment
from fulmen.plugins.environments.lightning import LightningEnvironment
from fulmen.plugins.environments.slurm import SLURMEnvironment
from fulmen.plugins.environments.torchelastic import TorchElasticEnvironment
from fulmen.utilities.cluster_layout import ClusterLayout


def environment_of_layout(layout: ClusterLayout | None, world_size: int) -> ClusterEnvironment:
    """The plugin that names the launcher of ``layout`` when the user gave none: torchrun's, SLURM's, or
    fulmen's own (``layout`` None: fulmen starts the ``world_size`` processes itself, or runs this one alone).
    Code written against Lightning reads the strategy's ``cluster_environment`` for the launcher and the ranks."""
    if layout is not None and layout.launcher == "torchrun":
        return TorchElasticEnvironment()
    if layout is not None and layout.launcher == "slurm":
        return SLURMEnvironment()
    environment = LightningEnvironment()
    environment.set_world_size(layout.world_size if layout is not None else world_size)
    environment.set_global_rank(layout.global_rank if layout is not None else 0)
    return environment

"""Cluster environments: who started the processes and where their ranks come from.

By default fulmen reads the launcher from the environment (torchrun's variables first, then SLURM's srun).
``Trainer(plugins=[SLURMEnvironment(auto_requeue=False)])`` (or ``TorchElasticEnvironment()``,
``LightningEnvironment()``, ``KubeflowEnvironment()``, ``LSFEnvironment()``, ``MPIEnvironment()``) names it
instead: its variables are the only ones read, and ``SLURMEnvironment`` also decides whether a job is
requeued on its signal.

An environment written for Lightning works too: a subclass of this ``ClusterEnvironment`` that implements
Lightning's methods (``world_size()``, ``global_rank()``, ``local_rank()``, ``node_rank()``, ``main_address``,
``main_port``) rather than :meth:`ClusterEnvironment.layout`, and Lightning Fabric's own environment objects,
which :func:`as_cluster_environment` wraps.
"""

from __future__ import annotations

# Every name the single module `fulmen.plugins.environments` had (its helpers and imports included) stays
# readable and patchable here, now that the module is a package.
from fulmen.plugins._interop import implements_foreign_base as implements_foreign_base
from fulmen.plugins._unavailable import XLA_INSTEAD as XLA_INSTEAD
from fulmen.plugins._unavailable import refuse as refuse
from fulmen.plugins._unavailable import require_package as require_package
from fulmen.plugins.environments.cluster_environment import _INTERFACE as _INTERFACE
from fulmen.plugins.environments.cluster_environment import _RANK_METHODS as _RANK_METHODS
from fulmen.plugins.environments.cluster_environment import ClusterEnvironment as ClusterEnvironment
from fulmen.plugins.environments.cluster_environment import _detected as _detected
from fulmen.plugins.environments.cluster_environment import _layout_from_methods as _layout_from_methods
from fulmen.plugins.environments.cluster_environment import _method as _method
from fulmen.plugins.environments.cluster_environment import _overrides as _overrides
from fulmen.plugins.environments.cluster_environment import log as log
from fulmen.plugins.environments.detect import environment_of_layout as environment_of_layout
from fulmen.plugins.environments.foreign import _WrappedEnvironment as _WrappedEnvironment
from fulmen.plugins.environments.foreign import as_cluster_environment as as_cluster_environment
from fulmen.plugins.environments.foreign import is_foreign_environment as is_foreign_environment
from fulmen.plugins.environments.foreign import user_environment as user_environment
from fulmen.plugins.environments.kubeflow import KubeflowEnvironment as KubeflowEnvironment
from fulmen.plugins.environments.lightning import LightningEnvironment as LightningEnvironment
from fulmen.plugins.environments.lsf import LSFEnvironment as LSFEnvironment
from fulmen.plugins.environments.mpi import MPIEnvironment as MPIEnvironment
from fulmen.plugins.environments.slurm import SLURMEnvironment as SLURMEnvironment
from fulmen.plugins.environments.torchelastic import TorchElasticEnvironment as TorchElasticEnvironment
from fulmen.plugins.environments.xla import XLAEnvironment as XLAEnvironment
from fulmen.utilities import cloud_io as cloud_io
from fulmen.utilities.cluster_layout import _INTERACTIVE_SLURM_JOBS as _INTERACTIVE_SLURM_JOBS
from fulmen.utilities.cluster_layout import ClusterLayout as ClusterLayout
from fulmen.utilities.cluster_layout import slurm_layout as slurm_layout
from fulmen.utilities.cluster_layout import torchrun_layout as torchrun_layout
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_only as rank_zero_only

__all__ = [
    "ClusterEnvironment",
    "KubeflowEnvironment",
    "LSFEnvironment",
    "LightningEnvironment",
    "MPIEnvironment",
    "SLURMEnvironment",
    "TorchElasticEnvironment",
    "XLAEnvironment",
]

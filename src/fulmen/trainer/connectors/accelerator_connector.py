"""``lightning.pytorch.trainer.connectors.accelerator_connector``: the Trainer picks its hardware with
:func:`fulmen.accelerators.select_accelerator`, its strategy with
:func:`fulmen.strategies.factory.select_strategy` and its precision plugin with
:func:`fulmen.precision.select_precision`."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import torch as torch  # Lightning's module holds it; the launchers read `torch.multiprocessing` when they start

from fulmen.accelerators import select_accelerator
from fulmen.accelerators.accelerator import Accelerator
from fulmen.accelerators.cuda import CUDAAccelerator as CUDAAccelerator
from fulmen.accelerators.mps import MPSAccelerator as MPSAccelerator
from fulmen.accelerators.registry import AcceleratorRegistry as AcceleratorRegistry
from fulmen.accelerators.xla import XLAAccelerator as XLAAccelerator
from fulmen.precision import DoublePrecision as DoublePrecision
from fulmen.precision import HalfPrecision as HalfPrecision
from fulmen.precision import MixedPrecision as MixedPrecision
from fulmen.precision import Precision, select_precision
from fulmen.strategies.ddp import DDPStrategy as DDPStrategy
from fulmen.strategies.deepspeed import DeepSpeedStrategy as DeepSpeedStrategy
from fulmen.strategies.factory import select_strategy
from fulmen.strategies.fsdp import FSDPStrategy as FSDPStrategy
from fulmen.strategies.model_parallel import ModelParallelStrategy as ModelParallelStrategy
from fulmen.strategies.parallel import ParallelStrategy as ParallelStrategy
from fulmen.strategies.registry import StrategyRegistry as StrategyRegistry
from fulmen.strategies.single_device import SingleDeviceStrategy as SingleDeviceStrategy
from fulmen.strategies.single_xla import SingleDeviceXLAStrategy as SingleDeviceXLAStrategy
from fulmen.strategies.strategy import Strategy
from fulmen.strategies.xla import XLAStrategy as XLAStrategy
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn

if TYPE_CHECKING:
    from fulmen.trainer.config import TrainerConfig
    from fulmen.trainer.trainer import Trainer

# whether Python runs interactively (a REPL, `python -i`, a notebook's kernel): read when a Trainer picks its
# strategy, so that patching it (as Lightning's tests do) changes what `strategy="auto"` picks
_IS_INTERACTIVE = hasattr(sys, "ps1") or bool(sys.flags.interactive)


def choose_strategy(config: TrainerConfig) -> Strategy:
    """The Trainer's strategy for its validated flags (:func:`select_strategy`): in an interactive session,
    ``strategy="auto"`` over several devices forks its processes (``"ddp_fork"``)."""
    return select_strategy(
        config.strategy, config.accelerator, config.devices, config.num_nodes, config.precision,
        config.precision_plugin, config.sync_batchnorm, config.cluster_environment, interactive=_IS_INTERACTIVE,
    )  # fmt: skip


__all__ = ["select_accelerator", "select_precision", "select_strategy"]


class _AcceleratorConnector:
    """``trainer._accelerator_connector``: read by libraries written against Lightning's trainer internals (the
    pruning callback of optuna-integration asks ``is_distributed`` to choose how it reports across processes).
    A read-only view of the choices the Trainer made; fulmen itself never reads it."""

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    @property
    def is_distributed(self) -> bool:
        """Whether the strategy runs several communicating processes (the DDP family, FSDP, DeepSpeed)."""
        return self._trainer.strategy.is_distributed

    @property
    def strategy(self) -> Strategy:
        return self._trainer.strategy

    @property
    def accelerator(self) -> Accelerator:
        return self._trainer.accelerator

    @property
    def precision_plugin(self) -> Precision:
        return self._trainer.precision_plugin


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "BitsandbytesPrecision": "fulmen.plugins.precision.bitsandbytes.BitsandbytesPrecision",
    "CheckpointIO": "fulmen.plugins.io.checkpoint_plugin.CheckpointIO",
    "ClusterEnvironment": "fulmen.plugins.environments.ClusterEnvironment",
    "DeepSpeedPrecision": "fulmen.plugins.precision.deepspeed.DeepSpeedPrecision",
    "FSDPPrecision": "fulmen.plugins.precision.fsdp.FSDPPrecision",
    "LSFEnvironment": "fulmen.plugins.environments.LSFEnvironment",
    "LayerSync": "fulmen.plugins.layer_sync.LayerSync",
    "LightningEnvironment": "fulmen.plugins.environments.LightningEnvironment",
    "MPIEnvironment": "fulmen.plugins.environments.MPIEnvironment",
    "SLURMEnvironment": "fulmen.plugins.environments.SLURMEnvironment",
    "TorchElasticEnvironment": "fulmen.plugins.environments.TorchElasticEnvironment",
    "TorchSyncBatchNorm": "fulmen.plugins.layer_sync.TorchSyncBatchNorm",
    "TransformerEnginePrecision": "fulmen.plugins.precision.transformer_engine.TransformerEnginePrecision",
    "XLAPrecision": "fulmen.plugins.precision.xla.XLAPrecision",
})  # fmt: skip

"""Lightning's import path ``lightning.pytorch.trainer.connectors.accelerator_connector``: the Trainer picks
its hardware with :func:`fulmen.accelerators.select_accelerator`, its strategy with
:func:`fulmen.strategies.factory.select_strategy` and its precision plugin with
:func:`fulmen.precision.select_precision`."""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING, Any

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
from fulmen.trainer.flags import TrainerConfig, parse_flags
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn

if TYPE_CHECKING:
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
    """The hardware, strategy and precision chosen for a set of Trainer flags: ``trainer._accelerator_connector``
    (a view of the Trainer's choices), or made directly with the Trainer's hardware arguments, as libraries do to
    parse device arguments the way the Trainer will (``_AcceleratorConnector(accelerator="cpu", devices=2)``).
    Libraries written against Lightning's internals read it: optuna-integration asks ``is_distributed``,
    finetuning-scheduler ``_strategy_flag``. fulmen itself never reads it."""

    def __init__(
        self,
        devices: list[int] | str | int = "auto",
        num_nodes: int = 1,
        accelerator: str | Accelerator = "auto",
        strategy: str | Strategy = "auto",
        plugins: Any = None,
        precision: int | str | None = None,
        sync_batchnorm: bool = False,
        benchmark: bool | None = None,
        use_distributed_sampler: bool = True,
        deterministic: bool | str | None = None,
    ) -> None:
        from fulmen.trainer.trainer import (
            Trainer,  # the same layer; imported here because trainer.py imports this
        )

        given = {k: v for k, v in locals().items() if k not in ("self", "Trainer")}
        defaults = {name: p.default for name, p in inspect.signature(Trainer.__init__).parameters.items()
                    if p.default is not inspect.Parameter.empty}  # fmt: skip
        config = parse_flags({**defaults, **given})
        self._set(config, choose_strategy(config))

    @classmethod
    def of_trainer(cls, trainer: Trainer) -> _AcceleratorConnector:
        """The view of ``trainer``'s flags and the strategy it made from them."""
        connector = cls.__new__(cls)
        connector._set(trainer.config, trainer.strategy)
        return connector

    def _set(self, config: TrainerConfig, strategy: Strategy) -> None:
        self.config = config
        self.strategy = strategy
        self.accelerator: Accelerator = config.accelerator
        self.precision_plugin: Precision = strategy.precision_plugin
        self.cluster_environment = getattr(strategy, "cluster_environment", None)
        self.checkpoint_io = config.checkpoint_io
        self.use_distributed_sampler = config.use_distributed_sampler
        self._layer_sync = config.layer_sync
        self._precision_plugin_flag = config.precision_plugin
        self._cluster_environment_flag = config.cluster_environment
        self._num_nodes_flag = config.num_nodes
        self._strategy_flag_set: str | Strategy | None = None

    @property
    def is_distributed(self) -> bool:
        """Whether the strategy runs several communicating processes (the DDP family, FSDP, DeepSpeed)."""
        return self.strategy.is_distributed

    # -- the flags as Lightning records them once resolved ----------------------------------------------------
    @property
    def _strategy_flag(self) -> str | Strategy:
        """The strategy's name as given; for ``"auto"`` the name chosen (``"ddp"``) when it runs several
        processes, else the Strategy object; a Strategy given as an object, that object. Settable (tests of
        libraries set it to steer a check); the Trainer's strategy does not change."""
        if self._strategy_flag_set is not None:
            return self._strategy_flag_set
        given = self.config.arguments.get("strategy", "auto")
        if given != "auto":
            return given
        return self.strategy.strategy_name if self.strategy.is_distributed else self.strategy

    @_strategy_flag.setter
    def _strategy_flag(self, value: str | Strategy) -> None:
        self._strategy_flag_set = value

    @property
    def _accelerator_flag(self) -> str:
        return self.accelerator.name()

    @property
    def _devices_flag(self) -> list[int] | str | int:
        given = self.config.arguments.get("devices", "auto")
        return len(self.config.devices) if given == "auto" else given

    @property
    def _precision_flag(self) -> str:
        return self.config.precision

    @property
    def _parallel_devices(self) -> list[torch.device]:
        return list(self.config.devices)


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

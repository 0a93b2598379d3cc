"""``XLAStrategy``: one process per XLA device (a TPU host's cores), started by ``torch_xla``.

Constructing it needs ``torch_xla``, as in Lightning. fulmen does not drive ``torch_xla``'s multi-process
launcher, so a run with it is refused when the Trainer sets it up, naming what works instead: one XLA device
(``SingleDeviceXLAStrategy`` / ``Trainer(accelerator="tpu", devices=1)``), or DDP / FSDP on GPUs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from fulmen.accelerators.xla import require_xla
from fulmen.precision import Precision as Precision
from fulmen.strategies.ddp import DDPStrategy
from fulmen.strategies.launchers.xla import _XLALauncher
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _XLA_AVAILABLE as _XLA_AVAILABLE
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.parameter_tying import find_shared_parameters as find_shared_parameters
from fulmen.utilities.parameter_tying import set_shared_parameters as set_shared_parameters
from fulmen.utilities.rank_zero import rank_zero_only as rank_zero_only

if TYPE_CHECKING:
    from fulmen.accelerators import Accelerator
    from fulmen.plugins.io import CheckpointIO
    from fulmen.precision import Precision
    from fulmen.utilities.cluster_layout import ClusterLayout


class XLAStrategy(DDPStrategy):
    """Data parallelism over XLA devices (``debug``: torch_xla's debug output; ``sync_module_states``:
    broadcast rank 0's weights first). Needs ``torch_xla``; runs are refused (see the module docstring)."""

    strategy_name = "xla"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        debug: bool = False,
        sync_module_states: bool = True,
        **_: Any,
    ) -> None:
        require_xla("XLAStrategy (strategy='xla')", available=_XLA_AVAILABLE)
        super().__init__(
            accelerator=accelerator, parallel_devices=parallel_devices, checkpoint_io=checkpoint_io,
            precision_plugin=precision_plugin, start_method="fork",
        )  # fmt: skip
        self.strategy_name = "xla"  # not the fork launcher's name DDPStrategy gives
        self.debug = debug
        self._sync_module_states = sync_module_states
        self._launcher = _XLALauncher(self)

    def reduce(self, output: Any, group: Any = None, reduce_op: str | None = "mean") -> Any:
        """``output`` reduced over the processes (Lightning's argument names; runs are refused, see above)."""
        return super().reduce(output, group=group, reduce_op=reduce_op)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register("xla_debug", cls, description="XLA strategy with `debug` as True", debug=True)
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__)

    def check_launch(
        self, parallel_devices: list[torch.device], num_nodes: int, cluster: ClusterLayout | None
    ) -> None:
        raise MisconfigurationException(
            f"XLAStrategy trains in one process per XLA device ({len(parallel_devices)} here), started by "
            "torch_xla's launcher, which fulmen does not drive. Train on one XLA device "
            "(Trainer(accelerator='tpu', devices=1) or strategy=SingleDeviceXLAStrategy(0)), or on GPUs with "
            "strategy='ddp' / 'fsdp'."
        )


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "CheckpointIO": "fulmen.plugins.io.checkpoint_plugin.CheckpointIO",
    "TrainerFn": "fulmen.runtime.state.TrainerFn",
    "XLACheckpointIO": "fulmen.plugins.io.xla_plugin.XLACheckpointIO",
    "XLAEnvironment": "fulmen.plugins.environments.XLAEnvironment",
    "XLAPrecision": "fulmen.plugins.precision.xla.XLAPrecision",
})  # fmt: skip

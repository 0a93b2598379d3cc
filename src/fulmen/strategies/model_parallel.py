"""2-D parallelism: tensor parallelism inside a group of processes, FSDP2 across the groups.

The processes form a ``(data_parallel, tensor_parallel)`` DeviceMesh. The LightningModule's
``configure_model`` hook reads it as ``self.device_mesh`` and parallelises itself: torch's
``parallelize_module`` over ``self.device_mesh["tensor_parallel"]`` and ``fully_shard`` over
``self.device_mesh["data_parallel"]``. The strategy then shards what is left over the data-parallel dimension
(so every parameter's gradient is reduced) and runs the steps through that root, as
:class:`~fulmen.strategies.fsdp.FSDPStrategy` does. The processes of one tensor-parallel group see the same
batches: the data is shared out per data-parallel rank.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch

from fulmen.accelerators import Accelerator
from fulmen.core.optimizer import LightningOptimizer as LightningOptimizer
from fulmen.precision import Precision
from fulmen.strategies.parallel import ParallelStrategy as ParallelStrategy
from fulmen.strategies.sharded import ShardedStrategy
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _TORCH_GREATER_EQUAL_2_4 as _TORCH_GREATER_EQUAL_2_4
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import rank_zero_only as rank_zero_only
from fulmen.utilities.rank_zero import rank_zero_only as utils_rank_zero_only  # noqa: F401  (Lightning's name)
from fulmen.utilities.seed import reset_seed as reset_seed

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

MESH_NAMES = ("data_parallel", "tensor_parallel")


class ModelParallelStrategy(ShardedStrategy):
    """``ModelParallelStrategy(data_parallel_size, tensor_parallel_size)``: a 2-D mesh for ``configure_model``.

    Args:
        data_parallel_size: processes that hold different data ("auto": the number of nodes).
        tensor_parallel_size: processes that split each layer ("auto": the devices of a node).
        save_distributed_checkpoint: ``True``: checkpoints are sharded directories (each rank its shards);
            ``False``: rank 0 writes one ordinary file.
        process_group_backend, timeout: the process group's.
    """

    strategy_name = "model_parallel"

    def __init__(
        self,
        data_parallel_size: int | str = "auto",
        tensor_parallel_size: int | str = "auto",
        save_distributed_checkpoint: bool = True,
        process_group_backend: str | None = None,
        timeout: timedelta = timedelta(minutes=30),
        accelerator: Accelerator | None = None,
        precision_plugin: Precision | None = None,
    ) -> None:
        if not _TORCH_GREATER_EQUAL_2_4:  # read when made: a test patches it to see the refusal
            raise ImportError(
                f"{type(self).__name__} requires PyTorch 2.4 or higher (DTensor and `fully_shard`). Current "
                f"version: {torch.__version__}. Upgrade torch, or use strategy='ddp'."
            )
        for name, value in (("data_parallel_size", data_parallel_size), ("tensor_parallel_size", tensor_parallel_size)):
            if value != "auto" and not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                raise MisconfigurationException(
                    f"ModelParallelStrategy({name}={value!r}) must be a positive int or 'auto'."
                )
        super().__init__(accelerator=accelerator, precision_plugin=precision_plugin,
                         process_group_backend=process_group_backend, timeout=timeout,
                         state_dict_type="sharded" if save_distributed_checkpoint else "full")  # fmt: skip
        self._data_parallel_size = data_parallel_size
        self._tensor_parallel_size = tensor_parallel_size
        self.save_distributed_checkpoint = save_distributed_checkpoint

    def _sizes(self) -> tuple[int, int]:
        world = self.world_size
        dp, tp = self._data_parallel_size, self._tensor_parallel_size
        if dp == "auto" and tp == "auto":
            dp, tp = self.num_nodes, world // max(1, self.num_nodes)
        elif dp == "auto":
            dp = world // int(tp)
        elif tp == "auto":
            tp = world // int(dp)
        return int(dp), int(tp)

    def _build_mesh(self) -> DeviceMesh:
        dp, tp = self._sizes()
        if dp * tp != self.world_size:
            raise MisconfigurationException(
                f"ModelParallelStrategy(data_parallel_size={self._data_parallel_size!r}, tensor_parallel_size="
                f"{self._tensor_parallel_size!r}) makes a {dp} x {tp} mesh, but {self.world_size} processes are "
                "running. Choose sizes whose product is the number of processes (devices x num_nodes)."
            )
        return _setup_device_mesh(dp, tp, self.world_size, torch.device(self._mesh_device_type()))

    def _shard_mesh(self) -> DeviceMesh | None:
        mesh = self._device_mesh
        return mesh["data_parallel"] if mesh is not None else None

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        mesh = self._device_mesh
        if mesh is None:
            dp, _ = self._sizes()
            return {"num_replicas": dp, "rank": self.global_rank // max(1, self.world_size // dp)}
        data = mesh["data_parallel"]
        return {"num_replicas": data.size(), "rank": data.get_local_rank()}

    def setup(self, trainer: Any = None) -> None:
        hooks = self._hooks
        if hooks is not None and not hooks.module_overrides("configure_model"):
            raise TypeError(
                "When using the ModelParallelStrategy, you are required to override the `configure_model()` hook "
                "in the LightningModule and apply parallelization there: `parallelize_module(...)` over "
                "self.device_mesh['tensor_parallel'] and `fully_shard(...)` over self.device_mesh['data_parallel']."
            )
        super().setup(trainer)


def _setup_device_mesh(
    data_parallel_size: int, tensor_parallel_size: int, world_size: int, device: torch.device
) -> DeviceMesh:
    """The ``(data_parallel, tensor_parallel)`` mesh over the ``world_size`` processes, on ``device``'s type
    (Lightning's name: its tests patch it to set a strategy up without a process group)."""
    from torch.distributed.device_mesh import init_device_mesh

    if data_parallel_size * tensor_parallel_size != world_size:
        raise RuntimeError(
            f"The sizes `data_parallel_size={data_parallel_size}` and `tensor_parallel_size={tensor_parallel_size}`"
            f" multiplied should equal the world size ({world_size})."
        )
    return init_device_mesh(device.type, (data_parallel_size, tensor_parallel_size), mesh_dim_names=MESH_NAMES)


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "TrainerFn": "fulmen.runtime.state.TrainerFn",
})  # fmt: skip

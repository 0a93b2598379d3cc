"""``DeepSpeedStrategy``: ZeRO sharding through Microsoft's DeepSpeed engine.

Constructing it needs the ``deepspeed`` package, as in Lightning (a ``MisconfigurationException`` that is also
a ``ModuleNotFoundError`` names ``pip install deepspeed``). fulmen does not drive DeepSpeed's engine: with the
package installed the strategy constructs, keeps its configuration, and a run with it is refused when the
Trainer sets it up, naming what gives the same sharding here: ``FSDPStrategy`` (``sharding_strategy=
"FULL_SHARD"`` is ZeRO stage 3, ``"SHARD_GRAD_OP"`` stage 2; ``cpu_offload=True`` offloads parameters).
"""

from __future__ import annotations

import importlib.util
import json
import os
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from fulmen.accelerators import MissingPackageError
from fulmen.accelerators.cuda import CUDAAccelerator as CUDAAccelerator
from fulmen.precision import Precision as Precision
from fulmen.strategies.ddp import DDPStrategy
from fulmen.utilities.enums import GradClipAlgorithmType as GradClipAlgorithmType
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _DEEPSPEED_AVAILABLE as _DEEPSPEED_AVAILABLE
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import WarningCache as WarningCache
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.seed import reset_seed as reset_seed
from fulmen.utilities.types import LRSchedulerConfig as LRSchedulerConfig

if TYPE_CHECKING:
    from fulmen.accelerators import Accelerator
    from fulmen.precision import Precision
    from fulmen.utilities.cluster_layout import ClusterLayout

warning_cache = WarningCache()  # Lightning's module-level cache, for code that warns through it


def remove_module_hooks(model: torch.nn.Module) -> None:
    """Remove every forward, forward-pre, backward, ``state_dict`` and ``load_state_dict``-pre hook from
    ``model`` and all its submodules (the hooks an engine such as DeepSpeed's ZeRO-3 leaves on a model it
    wrapped), so the model runs and saves as a plain module again."""
    families = (
        "_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
        "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks",
    )  # fmt: skip
    for module in model.modules():
        for family in families:
            hooks = getattr(module, family, None)
            if hooks is not None:
                hooks.clear()  # in place: handles still held elsewhere then remove nothing
        module._is_full_backward_hook = None


class DeepSpeedStrategy(DDPStrategy):
    """DeepSpeed ZeRO (stages 1-3, CPU/NVMe offload). The arguments are DeepSpeed's configuration, kept in
    :attr:`config` (``config``: a dict or the path of a JSON file, else ``PL_DEEPSPEED_CONFIG_PATH``, else one
    built from the arguments); runs are refused (see the module docstring)."""

    strategy_name = "deepspeed"
    shards_the_model = True  # ZeRO stage 3 partitions the parameters (any stage is treated so, to be safe)
    DEEPSPEED_ENV_VAR = "PL_DEEPSPEED_CONFIG_PATH"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        zero_optimization: bool = True,
        stage: int = 2,
        remote_device: str | None = None,
        offload_optimizer: bool = False,
        offload_parameters: bool = False,
        offload_params_device: str = "cpu",
        nvme_path: str = "/local_nvme",
        params_buffer_count: int = 5,
        params_buffer_size: int = 100_000_000,
        max_in_cpu: int = 1_000_000_000,
        offload_optimizer_device: str = "cpu",
        optimizer_buffer_count: int = 4,
        block_size: int = 1_048_576,
        queue_depth: int = 8,
        single_submit: bool = False,
        overlap_events: bool = True,
        thread_count: int = 1,
        pin_memory: bool = False,
        sub_group_size: int = 1_000_000_000_000,
        contiguous_gradients: bool = True,
        overlap_comm: bool = True,
        allgather_partitions: bool = True,
        reduce_scatter: bool = True,
        allgather_bucket_size: int = 200_000_000,
        reduce_bucket_size: int = 200_000_000,
        zero_allow_untested_optimizer: bool = True,
        logging_batch_size_per_gpu: str | int = "auto",
        config: str | Path | dict[str, Any] | None = None,
        logging_level: int = 30,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        loss_scale: float = 0,
        initial_scale_power: int = 16,
        loss_scale_window: int = 1000,
        hysteresis: int = 2,
        min_loss_scale: int = 1,
        partition_activations: bool = False,
        cpu_checkpointing: bool = False,
        contiguous_memory_optimization: bool = False,
        synchronize_checkpoint_boundary: bool = False,
        load_full_weights: bool = False,
        precision_plugin: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta = timedelta(minutes=30),
        exclude_frozen_parameters: bool = False,
    ) -> None:
        _require_deepspeed()
        super().__init__(
            accelerator=accelerator, parallel_devices=parallel_devices, cluster_environment=cluster_environment,
            precision_plugin=precision_plugin, process_group_backend=process_group_backend, timeout=timeout,
        )  # fmt: skip
        self.config = _load_config(config, self.DEEPSPEED_ENV_VAR)
        if self.config is None:
            zero = _zero_config(
                stage=stage, contiguous_gradients=contiguous_gradients, overlap_comm=overlap_comm,
                allgather_partitions=allgather_partitions, reduce_scatter=reduce_scatter,
                allgather_bucket_size=allgather_bucket_size, reduce_bucket_size=reduce_bucket_size,
                sub_group_size=sub_group_size, offload_optimizer=offload_optimizer,
                offload_optimizer_device=offload_optimizer_device, optimizer_buffer_count=optimizer_buffer_count,
                offload_parameters=offload_parameters, offload_params_device=offload_params_device,
                params_buffer_count=params_buffer_count, params_buffer_size=params_buffer_size,
                max_in_cpu=max_in_cpu, nvme_path=nvme_path, pin_memory=pin_memory,
            )  # fmt: skip
            self.config = {
                "zero_allow_untested_optimizer": zero_allow_untested_optimizer,
                "activation_checkpointing": {
                    "partition_activations": partition_activations, "cpu_checkpointing": cpu_checkpointing,
                    "contiguous_memory_optimization": contiguous_memory_optimization,
                    "synchronize_checkpoint_boundary": synchronize_checkpoint_boundary,
                },
                "aio": {"block_size": block_size, "queue_depth": queue_depth, "single_submit": single_submit,
                        "overlap_events": overlap_events, "thread_count": thread_count},
                **({"zero_optimization": zero} if zero_optimization else {}),
            }  # fmt: skip
        self.remote_device = remote_device
        self.load_full_weights = load_full_weights
        self.exclude_frozen_parameters = exclude_frozen_parameters
        self.logging_level = logging_level
        self.logging_batch_size_per_gpu = logging_batch_size_per_gpu
        self.loss_scale, self.initial_scale_power, self.loss_scale_window = loss_scale, initial_scale_power, loss_scale_window
        self.hysteresis, self.min_loss_scale = hysteresis, min_loss_scale

    @property
    def zero_stage_3(self) -> bool:
        zero = (self.config or {}).get("zero_optimization") or {}
        return bool(zero.get("stage") == 3)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Lightning's names for DeepSpeed: ``"deepspeed"`` and the ``"deepspeed_stage_*"`` presets."""
        strategy_registry.register("deepspeed", cls, description="Default DeepSpeed Strategy")
        strategy_registry.register("deepspeed_stage_1", cls, description="DeepSpeed with ZeRO Stage 1 enabled", stage=1)
        strategy_registry.register("deepspeed_stage_2", cls, description="DeepSpeed with ZeRO Stage 2 enabled", stage=2)
        strategy_registry.register(
            "deepspeed_stage_2_offload", cls, description="DeepSpeed ZeRO Stage 2 and CPU Offload", stage=2,
            offload_optimizer=True,
        )  # fmt: skip
        strategy_registry.register("deepspeed_stage_3", cls, description="DeepSpeed ZeRO Stage 3", stage=3)
        strategy_registry.register(
            "deepspeed_stage_3_offload", cls, description="DeepSpeed ZeRO Stage 3 and CPU Offload", stage=3,
            offload_optimizer=True, offload_parameters=True,
        )  # fmt: skip
        strategy_registry.register(
            "deepspeed_stage_3_offload_nvme", cls, description="DeepSpeed ZeRO Stage 3 and NVMe Offload", stage=3,
            offload_optimizer=True, offload_parameters=True, remote_device="nvme", offload_params_device="nvme",
            offload_optimizer_device="nvme",
        )  # fmt: skip

    @property
    def deepspeed_engine(self) -> Any:
        """The model the steps run through (in Lightning, DeepSpeed's engine; fulmen never builds one)."""
        return self.model

    def init_deepspeed(self) -> None:
        """Where Lightning builds DeepSpeed's engine around the model: refused, as runs with this strategy are."""
        self._refuse()

    def check_launch(
        self, parallel_devices: list[torch.device], num_nodes: int, cluster: ClusterLayout | None
    ) -> None:
        self._refuse()

    def _refuse(self) -> NoReturn:
        raise MisconfigurationException(
            "DeepSpeedStrategy: fulmen does not drive DeepSpeed's engine. For the same sharding use FSDPStrategy: "
            "strategy=FSDPStrategy(sharding_strategy='FULL_SHARD') is ZeRO stage 3, 'SHARD_GRAD_OP' stage 2, and "
            "cpu_offload=True offloads the parameters; or strategy='ddp' without sharding."
        )


def _require_deepspeed() -> None:
    """Refuse to construct the strategy without the ``deepspeed`` package, as Lightning does."""
    if importlib.util.find_spec("deepspeed") is None:
        raise MissingPackageError(
            "DeepSpeedStrategy needs the `deepspeed` package, which is not installed: pip install deepspeed "
            "(on a machine with NVIDIA GPUs). Without it, FSDPStrategy shards the same way: "
            "sharding_strategy='FULL_SHARD' is ZeRO stage 3, 'SHARD_GRAD_OP' stage 2.",
            name="deepspeed",
        )


def _zero_config(
    *, stage: int, contiguous_gradients: bool, overlap_comm: bool, allgather_partitions: bool,
    reduce_scatter: bool, allgather_bucket_size: int, reduce_bucket_size: int, sub_group_size: int,
    offload_optimizer: bool, offload_optimizer_device: str, optimizer_buffer_count: int, offload_parameters: bool,
    offload_params_device: str, params_buffer_count: int, params_buffer_size: int, max_in_cpu: int,
    nvme_path: str, pin_memory: bool,
) -> dict[str, Any]:  # fmt: skip
    """The ``"zero_optimization"`` section of a DeepSpeed configuration built from the strategy's arguments."""
    zero: dict[str, Any] = {
        "stage": stage, "contiguous_gradients": contiguous_gradients, "overlap_comm": overlap_comm,
        "allgather_partitions": allgather_partitions, "reduce_scatter": reduce_scatter,
        "allgather_bucket_size": allgather_bucket_size, "reduce_bucket_size": reduce_bucket_size,
        "sub_group_size": sub_group_size,
    }  # fmt: skip
    if offload_optimizer:
        zero["offload_optimizer"] = {"device": offload_optimizer_device, "nvme_path": nvme_path,
                                     "buffer_count": optimizer_buffer_count, "pin_memory": pin_memory}
    if offload_parameters:
        zero["offload_param"] = {"device": offload_params_device, "nvme_path": nvme_path,
                                 "buffer_count": params_buffer_count, "buffer_size": params_buffer_size,
                                 "max_in_cpu": max_in_cpu, "pin_memory": pin_memory}
    return zero


def _load_config(config: str | Path | dict[str, Any] | None, env_var: str) -> dict[str, Any] | None:
    """``config`` as a dict: given, read from a JSON file, or from the file the environment variable names."""
    if config is None and env_var in os.environ:
        config = os.environ[env_var]
    if config is None or isinstance(config, dict):
        return config
    path = Path(config)
    if not path.is_file():
        raise MisconfigurationException(
            f"DeepSpeedStrategy(config={str(config)!r}): no such file. Pass the path of a DeepSpeed JSON config, or a "
            "dict."
        )
    with path.open() as handle:
        loaded: dict[str, Any] = json.load(handle)
    return loaded


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "ClusterEnvironment": "fulmen.plugins.environments.ClusterEnvironment",
    "TrainerFn": "fulmen.runtime.state.TrainerFn",
})  # fmt: skip

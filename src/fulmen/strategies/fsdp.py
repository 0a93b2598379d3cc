"""``strategy="fsdp"``: :class:`FSDPStrategy`, Lightning's FSDP arguments translated onto torch's FSDP2
(``torch.distributed.fsdp.fully_shard``) on :class:`~fulmen.strategies.sharded.ShardedStrategy`.

Lightning's arguments map onto FSDP2 as :data:`ARGUMENTS` lists; what only torch's older FSDP understood is
accepted where it has nothing to do and refused (with the FSDP2 way) where ignoring it would change training.
The sharding itself is :mod:`~fulmen.strategies.sharded`'s, the checkpoints
:mod:`~fulmen.strategies.checkpoint_shards`'s.
"""

from __future__ import annotations

# The names imported as themselves (``X as X``) are what this module held before ShardedStrategy and its
# checkpoints moved out: libraries and tests import them from here, and patch the checkpoint steps here
# (_CHECKPOINT_GROUP is its value at import, None: checkpoint_shards holds the live one)
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer as Optimizer

from fulmen.accelerators import Accelerator
from fulmen.core.optimizer import LightningOptimizer as LightningOptimizer
from fulmen.precision import Precision
from fulmen.strategies.checkpoint_shards import _CHECKPOINT_GROUP as _CHECKPOINT_GROUP
from fulmen.strategies.checkpoint_shards import STATE_DICT_TYPES as STATE_DICT_TYPES
from fulmen.strategies.checkpoint_shards import CheckpointSteps
from fulmen.strategies.checkpoint_shards import _distributed_checkpoint_load as _distributed_checkpoint_load
from fulmen.strategies.checkpoint_shards import _is_full_checkpoint as _is_full_checkpoint
from fulmen.strategies.checkpoint_shards import _is_sharded_checkpoint as _is_sharded_checkpoint
from fulmen.strategies.checkpoint_shards import _lazy_load as _lazy_load
from fulmen.strategies.checkpoint_shards import _load_raw_module_state as _load_raw_module_state
from fulmen.strategies.checkpoint_shards import _parameter_names as _parameter_names
from fulmen.strategies.checkpoint_shards import _remove_checkpoint as _remove_checkpoint
from fulmen.strategies.checkpoint_shards import _ShardedOptimizerState as _ShardedOptimizerState
from fulmen.strategies.parallel import ParallelStrategy as ParallelStrategy
from fulmen.strategies.sharded import _FULLY_SHARD_KEYWORDS as _FULLY_SHARD_KEYWORDS
from fulmen.strategies.sharded import _ROOTS as _ROOTS
from fulmen.strategies.sharded import ShardedStrategy as ShardedStrategy
from fulmen.strategies.sharded import _fully_shard_api as _fully_shard_api
from fulmen.strategies.sharded import _materialise as _materialise
from fulmen.strategies.sharded import _no_gradient_sync as _no_gradient_sync
from fulmen.strategies.sharded import _on_meta as _on_meta
from fulmen.strategies.sharded import _post_order as _post_order
from fulmen.strategies.sharded import _shard_children as _shard_children
from fulmen.strategies.sharded import _ShardedRoot as _ShardedRoot
from fulmen.utilities import cloud_io as cloud_io
from fulmen.utilities.exceptions import InvalidValueError, MisconfigurationException
from fulmen.utilities.imports import _TORCH_GREATER_EQUAL_2_2 as _TORCH_GREATER_EQUAL_2_2
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import rank_zero_deprecation, rank_zero_warn
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_only as rank_zero_only
from fulmen.utilities.rank_zero import rank_zero_only as utils_rank_zero_only  # noqa: F401  (Lightning's name)
from fulmen.utilities.seed import reset_seed as reset_seed

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from fulmen.plugins.io import CheckpointIO


SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")

# torch's older FSDP's keywords that have nothing to do under FSDP2 (accepted, without effect), and why
_WITHOUT_EFFECT = {
    "use_orig_params": "FSDP2 always trains the original parameters",
    "limit_all_gathers": "FSDP2 bounds its all-gathers itself",
    "forward_prefetch": "FSDP2 prefetches the next layer's all-gather itself",
    "backward_prefetch": "FSDP2 prefetches the next layer's all-gather itself",
    "device_id": "each process shards onto its own device",
}
# ... and those that would change training if ignored: refused, saying what to do instead
_REFUSED = {
    "param_init_fn": "create the model with `trainer.init_module(empty_init=True)` (meta device) or in "
    "`configure_model`; the strategy materialises meta parameters with each module's `reset_parameters()`",
    "process_group": "pass `device_mesh=` (a DeviceMesh or a (replicate, shard) tuple) instead",
    "ignored_states": "pass `ignored_modules=` (their parameters are left unsharded)",
    "auto_wrap_policy_kwargs": "pass `auto_wrap_policy=` (a set of layer classes or a policy callable)",
}

ARGUMENTS = {
    "supported": ["auto_wrap_policy", "activation_checkpointing_policy", "activation_checkpointing", "cpu_offload",
                  "mixed_precision", "sharding_strategy", "state_dict_type", "device_mesh", "process_group_backend",
                  "timeout", "sync_module_states", "ignored_modules", *_FULLY_SHARD_KEYWORDS],
    "accepted without effect": sorted(_WITHOUT_EFFECT),
    "refused": sorted(_REFUSED),
}  # fmt: skip


class FSDPStrategy(ShardedStrategy):
    """``strategy="fsdp"``: parameters, gradients and optimizer state sharded over the processes (FSDP2).

    Args:
        auto_wrap_policy: which submodules become their own FSDP unit (gathered and freed on their own): a set
            of layer classes (e.g. ``{TransformerBlock}``) or a policy callable ``(module, recurse,
            nonwrapped_numel) -> bool`` (torch's ``ModuleWrapPolicy`` and ``size_based_auto_wrap_policy``
            are such callables). Without one, the whole model is one unit.
        activation_checkpointing_policy: the layer classes (a set, or a policy callable) whose activations are
            recomputed in backward instead of kept. ``activation_checkpointing``: the older list of classes.
        cpu_offload: ``True`` (or torch's ``CPUOffload(offload_params=True)``) keeps the shards in CPU memory.
        mixed_precision: FSDP2's ``MixedPrecisionPolicy`` (or torch's older ``MixedPrecision``, mapped).
            Without one, ``precision="bf16-mixed"`` / ``"16-mixed"`` keep float32 shards, compute under
            autocast (the numbers of one process under that flag) and reduce gradients in float32 (16-mixed
            with a sharded gradient scaler); pass ``MixedPrecisionPolicy(param_dtype=torch.bfloat16)`` to
            gather the parameters in bfloat16 instead.
        sharding_strategy: ``"FULL_SHARD"`` (parameters freed after forward), ``"SHARD_GRAD_OP"`` (kept until
            backward), ``"NO_SHARD"`` (replicated, as DDP), ``"HYBRID_SHARD"`` (sharded within a node,
            replicated across nodes: a 2-D mesh); torch's ``ShardingStrategy`` enum values work too.
        state_dict_type: ``"full"``: rank 0 writes one ordinary checkpoint file (gathered on the CPU);
            ``"sharded"``: each rank writes its shards into a checkpoint directory (torch.distributed.checkpoint).
        device_mesh: for ``HYBRID_SHARD``, a ``(replicate, shard)`` tuple or a 2-D ``DeviceMesh``.
        process_group_backend, timeout: the process group's, as for DDP.
        **kwargs: ``sync_module_states`` (broadcast rank 0's weights before sharding), ``ignored_modules``,
            FSDP2's ``fully_shard`` keywords; see :data:`ARGUMENTS` for torch's older keywords.
    """

    strategy_name = "fsdp"
    # Lightning's names of the checkpoint steps (_lazy_load, _is_sharded_checkpoint ...) are looked up in this
    # module when they run, so patching them here (as Lightning's tests do) reaches an FSDP run's checkpoints
    _checkpoint_steps: ClassVar[CheckpointSteps] = cast("CheckpointSteps", sys.modules[__name__])

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta = timedelta(minutes=30),
        cpu_offload: Any = None,
        mixed_precision: Any = None,
        auto_wrap_policy: Any = None,
        activation_checkpointing: Any = None,
        activation_checkpointing_policy: Any = None,
        sharding_strategy: Any = "FULL_SHARD",
        state_dict_type: str = "full",
        device_mesh: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(accelerator=accelerator, precision_plugin=precision_plugin,
                         process_group_backend=process_group_backend, timeout=timeout,
                         state_dict_type=state_dict_type)  # fmt: skip
        if checkpoint_io is not None:
            self.checkpoint_io = checkpoint_io
        if parallel_devices is not None:
            self.parallel_devices = list(parallel_devices)
        self.cluster_plugin = cluster_environment
        self.sharding_strategy = _sharding_name(sharding_strategy)
        self.cpu_offload = _offload_wanted(cpu_offload)
        self.mixed_precision = mixed_precision
        self.auto_wrap_policy = auto_wrap_policy
        self.activation_checkpointing_policy = _checkpointing_policy(
            activation_checkpointing, activation_checkpointing_policy
        )
        if device_mesh is not None and not _TORCH_GREATER_EQUAL_2_2:  # read when made: a test patches it
            raise ValueError(
                f"The `device_mesh` argument is only supported in torch >= 2.2. Current version: {torch.__version__}."
            )
        if device_mesh is not None and not _is_mesh(device_mesh) and not _is_mesh_shape(device_mesh):
            raise MisconfigurationException(
                f"FSDPStrategy(device_mesh={device_mesh!r}): pass a (replicate, shard) tuple of positive ints, "
                "e.g. (num_nodes, devices), or a 2-D torch DeviceMesh."
            )
        if device_mesh is not None and self.sharding_strategy in ("FULL_SHARD", "SHARD_GRAD_OP"):
            # a mesh given with the default strategy: Lightning's reading is hybrid sharding over that mesh
            self.sharding_strategy = "HYBRID_SHARD" if self.sharding_strategy == "FULL_SHARD" else "_HYBRID_SHARD_ZERO2"
        self._mesh_request = device_mesh
        self.kwargs = _check_keywords(kwargs)

    # the names register_strategies added (Lightning's record, shared by the class)
    _registered_strategies: list[str] = []

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Lightning's names for FSDP: ``"fsdp"`` and ``"fsdp_cpu_offload"``."""
        if not dist.is_available():
            return
        strategy_registry.register("fsdp", cls, description="Fully Sharded Data Parallel (FSDP) training")
        cls._registered_strategies.append("fsdp")
        strategy_registry.register(
            "fsdp_cpu_offload", cls, cpu_offload=True,
            description="Fully Sharded Data Parallel (FSDP) training with Full Sharding and CPU Offloading",
        )  # fmt: skip
        cls._registered_strategies.append("fsdp_cpu_offload")

    @classmethod
    def get_registered_strategies(cls) -> list[str]:
        """The names :meth:`register_strategies` registered so far."""
        return cls._registered_strategies

    @property
    def mixed_precision_config(self) -> Any:
        """The mixed precision the shards compute in: ``mixed_precision`` as given, else that of an
        ``FSDPPrecision`` plugin (torch's ``MixedPrecision``), else None."""
        if self.mixed_precision:
            return self.mixed_precision
        plugin = self.precision_plugin
        from fulmen.plugins.precision.fsdp import FSDPPrecision  # the plugins package loads on first use

        if isinstance(plugin, FSDPPrecision):
            return plugin.mixed_precision_config
        return None

    def _mixed_precision_policy(self) -> Any:
        given = self.mixed_precision
        fsdp = _fully_shard_api()
        if given is not None and not isinstance(given, fsdp.MixedPrecisionPolicy):
            return _from_fsdp1_mixed_precision(given, fsdp)  # torch's older MixedPrecision
        return super()._mixed_precision_policy()

    def _build_mesh(self) -> DeviceMesh:
        from torch.distributed.device_mesh import init_device_mesh

        request = self._mesh_request
        if _is_mesh(request):
            return request
        world = self.world_size
        if self.sharding_strategy == "NO_SHARD":
            shape: tuple[int, ...] = (world, 1)  # replicated over every process, a shard group of one
        elif self.sharding_strategy in ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"):
            shape = tuple(request) if request is not None else (self.num_nodes, world // max(1, self.num_nodes))
        else:
            shape = (world,)
        if _product(shape) != world:
            raise MisconfigurationException(
                f"FSDPStrategy(device_mesh={request!r}) covers {_product(shape)} processes but {world} are "
                f"running. Pick (replicate, shard) with replicate x shard = {world}, e.g. ({self.num_nodes}, "
                f"{world // max(1, self.num_nodes)})."
            )
        names = ("data_parallel",) if len(shape) == 1 else ("replicate", "shard")
        return init_device_mesh(self._mesh_device_type(), shape, mesh_dim_names=names)


# -- helpers -------------------------------------------------------------------------------------------------
def _sharding_name(value: Any) -> str:
    name = getattr(value, "name", value)  # torch's ShardingStrategy enum, or its name
    if not isinstance(name, str) or name.upper() not in SHARDING_STRATEGIES:
        raise MisconfigurationException(
            f"FSDPStrategy(sharding_strategy={value!r}) is not a sharding strategy. Use one of "
            f"{list(SHARDING_STRATEGIES[:4])} (or torch's ShardingStrategy enum)."
        )
    return name.upper()


def _offload_wanted(value: Any) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    offload = getattr(value, "offload_params", None)  # torch's older CPUOffload
    if offload is not None:
        return bool(offload)
    if type(value).__name__ in ("CPUOffloadPolicy", "OffloadPolicy"):
        return type(value).__name__ == "CPUOffloadPolicy"
    raise MisconfigurationException(
        f"FSDPStrategy(cpu_offload={value!r}): pass True / False, torch's CPUOffload(offload_params=...) or "
        "FSDP2's CPUOffloadPolicy()."
    )


def _checkpointing_policy(classes: Any, policy: Any) -> Any:
    """A tuple of layer classes or a policy callable (None: no activation checkpointing)."""
    if classes is not None and policy is not None:  # a ValueError in Lightning: both classes catch it
        raise InvalidValueError(
            "FSDPStrategy got both activation_checkpointing and activation_checkpointing_policy: pass only "
            "activation_checkpointing_policy (a set of layer classes or a policy callable)."
        )
    if classes is not None:  # the older argument, deprecated in Lightning's words
        listed = set(classes) if isinstance(classes, list) else {classes}
        rank_zero_deprecation(
            f"`FSDPStrategy(activation_checkpointing={classes})` is deprecated, use "
            f"`FSDPStrategy(activation_checkpointing_policy={listed})` instead."
        )
    chosen = policy if policy is not None else classes
    if chosen is None:
        return None
    if isinstance(chosen, type):
        return (chosen,)
    if isinstance(chosen, set | frozenset | list | tuple):
        if not all(isinstance(c, type) and issubclass(c, nn.Module) for c in chosen):
            raise MisconfigurationException(
                f"FSDPStrategy(activation_checkpointing_policy={chosen!r}): every entry must be an nn.Module class."
            )
        return tuple(chosen)
    if callable(chosen):
        return chosen
    raise MisconfigurationException(
        f"FSDPStrategy(activation_checkpointing_policy={chosen!r}): pass a set of layer classes or a policy callable."
    )


def _check_keywords(kwargs: dict[str, Any]) -> dict[str, Any]:
    for name in kwargs:
        if name in _REFUSED:
            raise MisconfigurationException(f"FSDPStrategy({name}=...) is not supported on FSDP2: {_REFUSED[name]}.")
        known = name in _WITHOUT_EFFECT or name in _FULLY_SHARD_KEYWORDS or name in ("sync_module_states",
                                                                                      "ignored_modules")  # fmt: skip
        if not known:
            raise MisconfigurationException(
                f"FSDPStrategy got an unknown keyword {name}={kwargs[name]!r}. It accepts Lightning's arguments, "
                f"FSDP2's fully_shard keywords {list(_FULLY_SHARD_KEYWORDS)}, sync_module_states and ignored_modules."
            )
    for name in sorted(set(kwargs) & set(_WITHOUT_EFFECT)):
        rank_zero_warn(f"FSDPStrategy({name}=...) has no effect: {_WITHOUT_EFFECT[name]}.")
    return dict(kwargs)


def _from_fsdp1_mixed_precision(given: Any, fsdp: Any) -> Any:
    """torch's older ``MixedPrecision(param_dtype, reduce_dtype, buffer_dtype, ...)`` as FSDP2's policy."""
    fields = ("param_dtype", "reduce_dtype", "buffer_dtype")
    if not all(hasattr(given, f) for f in fields):
        raise MisconfigurationException(
            f"FSDPStrategy(mixed_precision={given!r}): pass FSDP2's MixedPrecisionPolicy(param_dtype=..., "
            "reduce_dtype=...) (or torch's older MixedPrecision)."
        )
    buffer_dtype = given.buffer_dtype
    if buffer_dtype is not None and buffer_dtype != given.param_dtype:
        raise MisconfigurationException(
            f"FSDPStrategy(mixed_precision=MixedPrecision(buffer_dtype={buffer_dtype})): FSDP2 does not cast "
            "buffers. Drop buffer_dtype (buffers keep their dtype) or cast them yourself in configure_model."
        )
    return fsdp.MixedPrecisionPolicy(param_dtype=given.param_dtype, reduce_dtype=given.reduce_dtype)


def _is_mesh(value: Any) -> bool:
    return type(value).__name__ == "DeviceMesh"


def _is_mesh_shape(value: Any) -> bool:
    return isinstance(value, tuple | list) and len(value) == 2 and all(isinstance(v, int) and v > 0 for v in value)


def _product(shape: tuple[int, ...]) -> int:
    out = 1
    for size in shape:
        out *= size
    return out


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "CheckpointIO": "fulmen.plugins.io.checkpoint_plugin.CheckpointIO",
    "ClusterEnvironment": "fulmen.plugins.environments.ClusterEnvironment",
    "FSDPPrecision": "fulmen.plugins.precision.fsdp.FSDPPrecision",
    "TrainerFn": "fulmen.runtime.state.TrainerFn",
})  # fmt: skip

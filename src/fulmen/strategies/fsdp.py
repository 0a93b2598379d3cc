"""Fully sharded data parallel on torch's FSDP2 (``torch.distributed.fsdp.fully_shard``).

Each process keeps 1/N of every parameter, of its gradient and of the optimizer state; a layer's parameters
are gathered just before it runs and freed after it, and gradients are reduce-scattered in backward. The
processes, ranks and collectives are :class:`~fulmen.strategies.parallel.ParallelStrategy`'s (torchrun, SLURM
or fulmen's own launcher, as for DDP).

How a step runs. FSDP2 gathers a module's parameters in hooks around its ``forward``, but the trainer calls a
LightningModule's *steps*. The strategy therefore shards a thin root (:class:`_ShardedRoot`) around the module
whose forward runs a step by name: every step (training, validation, test, predict) goes through FSDP's root
hooks, which gather what no inner unit owns and, at the end of backward, reduce-scatter the gradients.

Lightning's arguments map onto FSDP2 as :data:`ARGUMENTS` lists; what only torch's older FSDP understood is
accepted where it has nothing to do and refused (with the FSDP2 way) where ignoring it would change training.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer

from fulmen.accelerators import Accelerator
from fulmen.core.optimizer import LightningOptimizer as LightningOptimizer
from fulmen.precision import Precision
from fulmen.strategies.parallel import ParallelStrategy
from fulmen.utilities import checkpoint_io, cloud_io, distributed_checkpoint
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

    from fulmen.core.module import LightningModule
    from fulmen.plugins.io import AsyncCheckpointIO, CheckpointIO

SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
STATE_DICT_TYPES = ("full", "sharded")

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
# FSDP2's own ``fully_shard`` keywords, passed through to every ``fully_shard`` call
_FULLY_SHARD_KEYWORDS = ("reshard_after_forward", "mp_policy", "offload_policy", "shard_placement_fn")

ARGUMENTS = {
    "supported": ["auto_wrap_policy", "activation_checkpointing_policy", "activation_checkpointing", "cpu_offload",
                  "mixed_precision", "sharding_strategy", "state_dict_type", "device_mesh", "process_group_backend",
                  "timeout", "sync_module_states", "ignored_modules", *_FULLY_SHARD_KEYWORDS],
    "accepted without effect": sorted(_WITHOUT_EFFECT),
    "refused": sorted(_REFUSED),
}  # fmt: skip


class _ShardedRoot(nn.Module):
    """The module FSDP shards last: its forward runs one of the LightningModule's steps by name."""

    def __init__(self, module: nn.Module, strategy: ShardedStrategy) -> None:
        super().__init__()
        self.module = module
        self._strategy = [strategy]  # a list: not registered as a submodule

    def forward(self, step: str, *args: Any, **kwargs: Any) -> Any:
        return self._strategy[0].call_step(step, *args, **kwargs)

    def attach(self, strategy: ShardedStrategy) -> None:
        """Run the steps of ``strategy`` (a later stage, or another Trainer, on the same sharded module)."""
        self._strategy[0] = strategy


# the process group of background sharded saves, with the default group it was made from (see _checkpoint_group)
_CHECKPOINT_GROUP: tuple[Any, Any] | None = None

# Lightning's names of checkpoint steps (whether a path is a sharded checkpoint directory; fill a state dict from
# one; delete a checkpoint, directory or file): the strategy calls them as this module's names, so patching them
# counts (as do the functions below)
_is_sharded_checkpoint = distributed_checkpoint.is_sharded_checkpoint
_distributed_checkpoint_load = distributed_checkpoint.load_sharded
_remove_checkpoint = distributed_checkpoint.remove


def _is_full_checkpoint(path: str | os.PathLike[str]) -> bool:
    """A checkpoint in one local file (what ``state_dict_type="full"`` writes), which :func:`_lazy_load` reads."""
    return not cloud_io.is_remote(os.fspath(path)) and os.path.isfile(path)


def _lazy_load(path: str | os.PathLike[str], weights_only: bool | None = None) -> dict[str, Any]:
    """A full checkpoint file with its tensors mapped from the file rather than read: every rank opens the same
    file, and the machine's memory holds one copy of it (the page cache's), not one per rank."""
    return checkpoint_io.load(path, map_location="cpu", weights_only=weights_only, mmap=True)


def _load_raw_module_state(
    state_dict: Mapping[str, Any], module: nn.Module, world_size: int = 1, strict: bool = True
) -> None:
    """Whole tensors (a full checkpoint's) into the sharded ``module``: each rank keeps its shard of each."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, strict=strict)
    set_model_state_dict(module, dict(state_dict), options=options)

# each module's sharded root: FSDP2 shards a module in place and only once, so later stages reuse it
_ROOTS: weakref.WeakKeyDictionary[nn.Module, _ShardedRoot] = weakref.WeakKeyDictionary()


def _fully_shard_api() -> Any:
    from torch.distributed import fsdp

    return fsdp


class ShardedStrategy(ParallelStrategy):
    """What FSDP and 2-D model parallelism share: a sharded root around the module, steps through it,
    gradient sync switched off while accumulating, sharded / full checkpoints, meta-device materialisation."""

    strategy_name = "sharded"

    def __init__(
        self, accelerator: Accelerator | None = None, precision_plugin: Precision | None = None,
        process_group_backend: str | None = None, timeout: timedelta = timedelta(minutes=30),
        state_dict_type: str = "full",
    ) -> None:  # fmt: skip
        super().__init__(accelerator=accelerator, precision_plugin=precision_plugin,
                         process_group_backend=process_group_backend, timeout=timeout)  # fmt: skip
        if state_dict_type not in STATE_DICT_TYPES:
            raise MisconfigurationException(
                f"{type(self).__name__}(state_dict_type={state_dict_type!r}) is not a checkpoint format. Use "
                "'full' (one file, written by rank 0) or 'sharded' (a directory of every rank's shards)."
            )
        self.state_dict_type = state_dict_type
        self.sharding_strategy = "FULL_SHARD"
        self.cpu_offload = False
        self.mixed_precision: Any = None
        self.auto_wrap_policy: Any = None
        self.activation_checkpointing_policy: Any = None
        self.kwargs: dict[str, Any] = {}
        self._device_mesh: DeviceMesh | None = None
        self._checkpoint_stager: Any = None  # DCP's stager of the background sharded saves (AsyncCheckpointIO)
        # the sharded root around the module once setup() sharded it (None before): the steps run through it,
        # and checkpoints are gathered from (and loaded into) the shards only then
        self._sharded_root: _ShardedRoot | None = None

    def _build_mesh(self) -> DeviceMesh:
        raise NotImplementedError

    def _shard_mesh(self) -> DeviceMesh | None:
        """The mesh (or sub-mesh) ``fully_shard`` shards over."""
        return self._device_mesh

    # -- the mesh ------------------------------------------------------------------------------------------
    @property
    def device_mesh(self) -> DeviceMesh | None:
        """The DeviceMesh the parameters are sharded over (built when the run starts)."""
        return self._device_mesh

    def setup_environment(self) -> None:
        super().setup_environment()
        self._device_mesh = self._build_mesh()

    def _mesh_device_type(self) -> str:
        return self._root_device.type

    # -- set-up ----------------------------------------------------------------------------------------
    @property
    def restore_checkpoint_after_setup(self) -> bool:
        return True

    @property
    def supports_inference_mode(self) -> bool:
        # FSDP2 allocates a unit's gathered parameters at its first forward: made under inference_mode (a
        # sanity check before any training step), they are inference tensors that training cannot write
        # into. Evaluation runs under no_grad instead, as Lightning does under FSDP.
        return False

    def tensor_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager[Any]:
        """``empty_init=True``: on the meta device (no memory at all); the strategy materialises the model
        already sharded, each process allocating only its shards. Otherwise on the CPU, in the precision's
        dtype (the model moves to the device as it is sharded)."""
        stack = contextlib.ExitStack()
        if empty_init:
            stack.enter_context(torch.device("meta"))
        stack.enter_context(self.precision_plugin.module_init_context())
        return stack

    def connect(self, model: LightningModule) -> None:
        super().connect(model)
        self._sharded_root = None  # until setup() shards it (or finds it sharded)

    def setup(self, trainer: Any = None) -> None:
        module = self._lightning_module
        assert module is not None
        root = _ROOTS.get(module)
        if root is not None:  # sharded by an earlier stage (FSDP2 changes the module in place, once)
            root.attach(self)
            self._model = self._sharded_root = self._strategy_wrapper = root
            self._setup_precision_unless_fitting(trainer)
            return
        self.precision_plugin.convert_module(module)  # '-true' precisions: the dtype the shards keep
        # e.g. SyncBatchNorm: the layers are swapped before sharding, so the shards hold the synced layers; the
        # sharded module stays as it is after fit (FSDP2 changes it in place, once)
        self._sync_layers(module)
        if not _on_meta(module):
            if self.kwargs.get("sync_module_states"):
                self._broadcast_module(module)
            if not self.cpu_offload:
                module.to(self._root_device)
        self._apply_activation_checkpointing(module)
        self._shard_units(module)
        if not module.automatic_optimization:
            _shard_children(module, self._fully_shard)
        root = _ShardedRoot(module, self)
        self._fully_shard(root)
        if _on_meta(root):
            _materialise(root, self._root_device if not self.cpu_offload else torch.device("cpu"))
        _ROOTS[module] = root
        self._model = self._sharded_root = self._strategy_wrapper = root
        self._adapt_scaler()
        self._setup_precision_unless_fitting(trainer)

    def _fully_shard_kwargs(self) -> dict[str, Any]:
        fsdp = _fully_shard_api()
        kwargs: dict[str, Any] = {"mesh": self._shard_mesh()}
        kwargs["reshard_after_forward"] = self.sharding_strategy in ("FULL_SHARD", "HYBRID_SHARD")
        policy = self._mixed_precision_policy()
        if policy is not None:
            kwargs["mp_policy"] = policy
        if self.cpu_offload:  # pinned host memory for fast copies to a GPU (pinning needs one)
            kwargs["offload_policy"] = fsdp.CPUOffloadPolicy(pin_memory=self._root_device.type == "cuda")
        kwargs.update({k: v for k, v in self.kwargs.items() if k in _FULLY_SHARD_KEYWORDS})
        return kwargs

    def _fully_shard(self, module: nn.Module) -> None:
        kwargs = self._fully_shard_kwargs()
        ignored = self._ignored_params()
        if ignored:
            kwargs["ignored_params"] = ignored
        _fully_shard_api().fully_shard(module, **kwargs)

    def _ignored_params(self) -> set[nn.Parameter]:
        modules = self.kwargs.get("ignored_modules") or ()
        return {p for m in modules for p in m.parameters()}

    def _shard_units(self, module: nn.Module) -> None:
        """``fully_shard`` every submodule the auto-wrap policy picks, innermost first (an outer unit then
        manages only what its inner units do not)."""
        policy = self.auto_wrap_policy
        if policy is None:
            return
        picked: set[int] = set()
        for child in _post_order(module):
            if child is module:
                continue
            if isinstance(policy, set | frozenset | list | tuple):
                wrap = isinstance(child, tuple(policy))
            elif callable(policy):
                unwrapped = sum(p.numel() for p in child.parameters() if id(p) not in picked)
                wrap = bool(policy(module=child, recurse=False, nonwrapped_numel=unwrapped))
            else:
                raise MisconfigurationException(
                    f"FSDPStrategy(auto_wrap_policy={policy!r}): pass a set of layer classes (e.g. "
                    "{nn.TransformerEncoderLayer}) or a policy callable (module, recurse, nonwrapped_numel) -> bool."
                )
            if wrap:
                picked.update(id(p) for p in child.parameters())
                self._fully_shard(child)

    def _apply_activation_checkpointing(self, module: nn.Module) -> None:
        policy = self.activation_checkpointing_policy
        if policy is None:
            return
        from torch.distributed._composable import checkpoint

        for child in list(module.modules()):
            if child is module:
                continue
            if isinstance(policy, tuple):
                wanted = isinstance(child, policy)
            else:
                wanted = bool(policy(module=child, recurse=False, nonwrapped_numel=0))
            if wanted:
                checkpoint(child)  # composable: the module keeps its name (checkpoints stay interchangeable)

    def _mixed_precision_policy(self) -> Any:
        fsdp = _fully_shard_api()
        given = self.mixed_precision
        if given is not None:
            if isinstance(given, fsdp.MixedPrecisionPolicy):
                return given
            return _from_fsdp1_mixed_precision(given, fsdp)
        if self.precision_plugin.precision in ("bf16-mixed", "16-mixed"):
            # float32 shards gathered whole, autocast computing in half precision (the numbers of one process
            # under the same flag), gradients reduced in float32. Gathering in half precision halves that
            # traffic and memory: mixed_precision=MixedPrecisionPolicy(param_dtype=torch.bfloat16)
            return fsdp.MixedPrecisionPolicy(reduce_dtype=torch.float32)
        return None

    def _adapt_scaler(self) -> None:
        """'16-mixed': the gradient scaler must agree across ranks on whether a step had inf/NaN gradients
        (each rank sees only its shards): torch's sharded scaler all-reduces that finding."""
        scaler = getattr(self.precision_plugin, "scaler", None)
        if scaler is None:
            return
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        if not isinstance(scaler, ShardedGradScaler):
            self.precision_plugin.scaler = ShardedGradScaler(  # type: ignore[attr-defined]
                self._root_device.type, init_scale=scaler.get_scale() if scaler.is_enabled() else 2.0**16
            )

    def _broadcast_module(self, module: nn.Module) -> None:
        """``sync_module_states=True``: every rank starts from rank 0's weights and buffers."""
        with torch.no_grad():
            for tensor in [*module.parameters(), *module.buffers()]:
                dist.broadcast(tensor.data, src=0)

    # -- steps -------------------------------------------------------------------------------------------
    def call_step(self, step: str, *args: Any, **kwargs: Any) -> Any:
        assert self._hooks is not None
        return self._hooks.call_module(step, *args, **kwargs)

    def _step(self, name: str, *args: Any, **kwargs: Any) -> Any:
        root = self._sharded_root
        if root is None:  # before setup
            return super()._step(name, *args, **kwargs)
        context = self._step_context(name)
        if context is None:
            return root(name, *args, **kwargs)
        with context:
            return root(name, *args, **kwargs)

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._step("training_step", *args, **kwargs)

    def block_backward_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Accumulating batches: gradients stay unreduced (and unsharded) until the window's last batch."""
        root = self._sharded_root
        if root is not None:
            return _no_gradient_sync(root)
        return contextlib.nullcontext()

    # -- checkpoints ---------------------------------------------------------------------------------------
    def _options(self, full: bool, **extra: Any) -> Any:
        from torch.distributed.checkpoint.state_dict import StateDictOptions

        return StateDictOptions(full_state_dict=full, cpu_offload=full, **extra)

    def lightning_module_state_dict(self) -> dict[str, Any]:
        """The module's weights: gathered whole on rank 0 (``"full"``; the other ranks get ``{}``), or this
        rank's shards (``"sharded"``). Every rank must call it (gathering is collective)."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        module = self._lightning_module
        if module is None:
            return {}
        if self._sharded_root is None:
            return module.state_dict()
        return get_model_state_dict(module, options=self._options(self.state_dict_type == "full"))

    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """``"full"``: torch.optim's own layout (parameters by position), gathered on rank 0, so the file is the
        one a single process writes; ``"sharded"``: this rank's shards, by parameter name."""
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        module = self._lightning_module
        if module is None or self._sharded_root is None:
            return optimizer.state_dict()
        full = self.state_dict_type == "full"
        state = get_optimizer_state_dict(module, optimizer, options=self._options(full))
        return distributed_checkpoint.optimizer_state_by_position(state) if full else state

    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        from torch.distributed.checkpoint.state_dict import set_model_state_dict
        from torch.distributed.tensor import DTensor

        module = self._lightning_module
        assert module is not None
        state_dict = checkpoint["state_dict"]
        if self._sharded_root is None:
            module.load_state_dict(state_dict, strict=strict)
            return
        if not any(isinstance(v, DTensor) for v in state_dict.values()):
            _load_raw_module_state(state_dict, module, self.world_size, strict)
            return
        set_model_state_dict(module, state_dict, options=self._options(False, strict=strict))

    def load_optimizer_states(self, states: list[Any], optimizers: list[Optimizer]) -> None:
        from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

        module = self._lightning_module
        if module is None or self._sharded_root is None:
            super().load_optimizer_states(states, optimizers)
            return
        names = _parameter_names(module)
        for optimizer, state in zip(optimizers, states):
            if isinstance(state, _ShardedOptimizerState):
                state = state.load(module, optimizer)
                whole = False
            else:  # a file checkpoint: parameters by position, whole tensors
                order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
                state = distributed_checkpoint.optimizer_state_by_name(state, order)
                whole = True
            set_optimizer_state_dict(module, optimizer, state, options=self._options(whole))

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        if self.state_dict_type == "full":
            path = os.fspath(filepath)
            if self.is_global_zero and os.path.isdir(path):  # a sharded checkpoint of the same name
                _remove_checkpoint(path)
            super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)
            return
        if cloud_io.is_remote(os.fspath(filepath)):  # the shards are written with local file operations
            raise MisconfigurationException(
                f"{type(self).__name__}(state_dict_type='sharded') writes checkpoint directories on a local or shared "
                f"file system, not to {os.fspath(filepath)!r}. Point the checkpoint's dirpath at a mounted path, or "
                "use state_dict_type='full' (one file, which remote URLs take)."
            )
        if str(filepath).endswith(".safetensors"):
            raise MisconfigurationException(
                "A .safetensors export holds whole tensors: with FSDPStrategy(state_dict_type='sharded') save "
                "the checkpoint, then `fulmen consolidate` it, or use state_dict_type='full'."
            )
        checkpoint = dict(checkpoint)
        tensors = {distributed_checkpoint.MODEL_KEY: checkpoint.pop("state_dict")}
        optimizers = checkpoint.pop("optimizer_states", None)
        if optimizers is not None:
            checkpoint["sharded_optimizers"] = len(optimizers)
            for index, state in enumerate(optimizers):
                tensors[distributed_checkpoint.optimizer_key(index)] = state
        io = self._async_checkpoint_io()
        if io is None:
            distributed_checkpoint.save_sharded(
                tensors, checkpoint if self.is_global_zero else None, filepath, self.is_global_zero, self.barrier
            )
            return
        io.wait()  # at most one save in flight, on every rank: the staging buffers are the previous save's
        meta = io.snapshot(checkpoint) if self.is_global_zero else None  # the trainer may change its dicts
        complete = distributed_checkpoint.save_sharded_async(
            tensors, meta, filepath, self.is_global_zero, self.barrier, self._checkpoint_group(), self._stager()
        )
        io.run_in_background(complete, filepath)

    def _async_checkpoint_io(self) -> AsyncCheckpointIO | None:
        from fulmen.plugins.io.async_plugin import AsyncCheckpointIO

        io = self.checkpoint_io
        return io if isinstance(io, AsyncCheckpointIO) else None

    def _checkpoint_group(self) -> Any:
        """A gloo process group for the background sharded saves alone: their collectives run on DCP's thread
        while training runs its own on the main one, and two threads must not share a group (the ranks could
        pair different collectives). DCP's background saves also need a CPU backend, which NCCL runs lack."""
        global _CHECKPOINT_GROUP
        world = dist.group.WORLD
        if _CHECKPOINT_GROUP is None or _CHECKPOINT_GROUP[0] is not world:  # made once per default group
            # every rank gets here in the same save (sharded saves are collective), so all make it together
            _CHECKPOINT_GROUP = (world, dist.new_group(backend="gloo", timeout=self.timeout))
        return _CHECKPOINT_GROUP[1]

    def _stager(self) -> Any:
        """DCP's stager for the next background save (see :func:`distributed_checkpoint.new_stager`), kept for the
        run where the installed torch lets a stager stage again: the next save then reuses its host buffers."""
        if self._checkpoint_stager is not None:
            return self._checkpoint_stager
        stager = distributed_checkpoint.new_stager(pinned=self.root_device.type == "cuda")
        if stager is not None and distributed_checkpoint.stagers_are_reusable():
            self._checkpoint_stager = stager
        return stager

    def teardown(self) -> None:
        try:
            super().teardown()  # waits for the background saves, which read the stager's buffers
        finally:
            stager, self._checkpoint_stager = self._checkpoint_stager, None
            if stager is not None:
                stager.close()

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """A sharded directory: the model's shards load straight into the sharded module (from any number of
        processes that wrote it), the optimizers' when they exist; a local file: mapped from the file on every rank
        (their memory then holds one copy of it), unless a ``CheckpointIO`` of the user's reads it."""
        from torch.distributed.checkpoint.state_dict import get_model_state_dict

        io = self._async_checkpoint_io()
        if io is not None:
            io.wait()  # a sharded save still being written is read once complete
        module = self._lightning_module
        path = os.fspath(checkpoint_path)
        if not _is_sharded_checkpoint(path) or self._sharded_root is None:
            if _is_full_checkpoint(path) and self._reads_files_itself():
                return _lazy_load(path, weights_only)
            return super().load_checkpoint(checkpoint_path, weights_only=weights_only)
        assert module is not None
        checkpoint = dict(distributed_checkpoint.read_meta(path, weights_only=weights_only))
        state = get_model_state_dict(module)
        _distributed_checkpoint_load({distributed_checkpoint.MODEL_KEY: state}, path)
        checkpoint["state_dict"] = state
        count = int(checkpoint.pop("sharded_optimizers", 0))
        if count:
            checkpoint["optimizer_states"] = [_ShardedOptimizerState(path, i) for i in range(count)]
        return checkpoint

    def _reads_files_itself(self) -> bool:
        """Whether checkpoint files are read by fulmen's own reader (no user ``CheckpointIO`` to go through)."""
        from fulmen.plugins.io import TorchCheckpointIO  # fulmen.plugins loads on first use only

        io = self.checkpoint_io
        return type(getattr(io, "checkpoint_io", io)) is TorchCheckpointIO  # behind AsyncCheckpointIO too

    def remove_checkpoint(self, filepath: Any) -> None:
        io = self._async_checkpoint_io()
        if self.is_global_zero and io is not None and self.state_dict_type == "sharded":
            # after the save in flight (which may be the one replacing it), and not at all if that failed
            io.run_in_background(lambda: self._remove_now(io, filepath), filepath, removal=True)
            return
        if self.is_global_zero and os.path.isdir(os.fspath(filepath)):
            _remove_checkpoint(filepath)
            return
        super().remove_checkpoint(filepath)

    @staticmethod
    def _remove_now(io: AsyncCheckpointIO, filepath: Any) -> None:
        if os.path.isdir(os.fspath(filepath)):
            _remove_checkpoint(filepath)
        else:  # a file checkpoint of an earlier state_dict_type="full" run
            io.checkpoint_io.remove_checkpoint(filepath)


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


class _ShardedOptimizerState:
    """An optimizer's state in a sharded checkpoint, read when the optimizer exists (its shards need it)."""

    def __init__(self, path: str, index: int) -> None:
        self.path, self.index = path, index

    def load(self, module: nn.Module, optimizer: Optimizer) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

        state = get_optimizer_state_dict(module, optimizer)
        key = distributed_checkpoint.optimizer_key(self.index)
        distributed_checkpoint.load_sharded({key: state}, self.path)
        return state


@contextlib.contextmanager
def _no_gradient_sync(root: nn.Module) -> Iterator[None]:
    root.set_requires_gradient_sync(False)  # type: ignore[operator]
    try:
        yield
    finally:
        root.set_requires_gradient_sync(True)  # type: ignore[operator]


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


def _post_order(module: nn.Module) -> Iterator[nn.Module]:
    for child in module.children():
        yield from _post_order(child)
    yield module


def _shard_children(module: nn.Module, fully_shard: Callable[[nn.Module], None]) -> None:
    """Manual optimization: every child module holding unsharded parameters becomes its own FSDP unit.

    ``manual_backward`` runs inside ``training_step``, i.e. inside the root's forward, before the root has
    set up its backward hooks: gradients of parameters the root itself manages would never be reduced. A
    unit's hooks surround each call of that unit, so its backward is handled wherever it runs.
    """
    from torch.distributed.tensor import DTensor

    for child in module.children():
        if any(not isinstance(p, DTensor) for p in child.parameters()):
            fully_shard(child)
    direct = [name for name, p in module.named_parameters(recurse=False) if not isinstance(p, DTensor)]
    if direct:
        raise MisconfigurationException(
            f"Manual optimization under {type(module).__name__}'s sharded strategy: the parameters {direct} belong "
            "to the LightningModule itself, and their gradients, computed by manual_backward inside "
            "training_step, would not be reduced across processes. Move them into a submodule (e.g. an "
            "nn.ParameterDict or a small nn.Module)."
        )


def _on_meta(module: nn.Module) -> bool:
    return any(t.is_meta for t in [*module.parameters(), *module.buffers()])


def _materialise(module: nn.Module, device: torch.device) -> None:
    """Allocate a meta-device model's (sharded) parameters and initialise them with each module's
    ``reset_parameters()``: every process allocates only its shards."""
    tensors = [*module.parameters(), *module.buffers()]
    if not all(t.is_meta for t in tensors):
        real = sum(1 for t in tensors if not t.is_meta)
        raise MisconfigurationException(
            f"The model is partly on the meta device ({len(tensors) - real} tensors) and partly real ({real}): "
            "materialising it would replace the real values. Create all of it under "
            "`trainer.init_module(empty_init=True)` (or all of it without), then load real weights from a "
            "checkpoint."
        )
    module.to_empty(device=device)
    with torch.no_grad():
        for child in module.modules():
            reset: Callable[[], None] | None = getattr(child, "reset_parameters", None)
            if callable(reset):
                reset()


def _parameter_names(module: nn.Module) -> dict[int, str]:
    return {id(p): name for name, p in module.named_parameters()}


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "CheckpointIO": "fulmen.plugins.io.checkpoint_plugin.CheckpointIO",
    "ClusterEnvironment": "fulmen.plugins.environments.ClusterEnvironment",
    "FSDPPrecision": "fulmen.plugins.precision.fsdp.FSDPPrecision",
    "TrainerFn": "fulmen.runtime.state.TrainerFn",
})  # fmt: skip

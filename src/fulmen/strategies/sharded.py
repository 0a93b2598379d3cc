"""The sharding that FSDP and 2-D model parallelism share, on torch's FSDP2 (``torch.distributed.fsdp.fully_shard``):
:class:`ShardedStrategy`.

Each process keeps 1/N of every parameter, of its gradient and of the optimizer state; a layer's parameters
are gathered just before it runs and freed after it, and gradients are reduce-scattered in backward. The
processes, ranks and collectives are :class:`~fulmen.strategies.parallel.ParallelStrategy`'s (torchrun, SLURM
or fulmen's own launcher, as for DDP).

How a step runs. FSDP2 gathers a module's parameters in hooks around its ``forward``, but the trainer calls a
LightningModule's *steps*. The strategy therefore shards a thin root (:class:`_ShardedRoot`) around the module
whose forward runs a step by name: every step (training, validation, test, predict) goes through FSDP's root
hooks, which gather what no inner unit owns and, at the end of backward, reduce-scatter the gradients.

The checkpoints (full and sharded) are :mod:`~fulmen.strategies.checkpoint_shards`'s; Lightning's FSDP
arguments are mapped onto this in :mod:`~fulmen.strategies.fsdp`.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer

from fulmen.accelerators import Accelerator
from fulmen.precision import Precision
from fulmen.strategies import checkpoint_shards as _checkpoint
from fulmen.strategies.checkpoint_shards import STATE_DICT_TYPES, CheckpointSteps
from fulmen.strategies.parallel import ParallelStrategy
from fulmen.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from fulmen.core.module import LightningModule


# FSDP2's own ``fully_shard`` keywords, passed through to every ``fully_shard`` call
_FULLY_SHARD_KEYWORDS = ("reshard_after_forward", "mp_policy", "offload_policy", "shard_placement_fn")


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


# each module's sharded root: FSDP2 shards a module in place and only once, so later stages reuse it
_ROOTS: weakref.WeakKeyDictionary[nn.Module, _ShardedRoot] = weakref.WeakKeyDictionary()


def _fully_shard_api() -> Any:
    from torch.distributed import fsdp

    return fsdp


class ShardedStrategy(ParallelStrategy):
    """What FSDP and 2-D model parallelism share: a sharded root around the module, steps through it,
    gradient sync switched off while accumulating, sharded / full checkpoints, meta-device materialisation."""

    strategy_name = "sharded"
    shards_the_model = True
    # where the checkpoint code looks up Lightning's names of its steps when they run (FSDPStrategy: its module)
    _checkpoint_steps: ClassVar[CheckpointSteps] = _checkpoint

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
        if given is not None:  # FSDP2's MixedPrecisionPolicy (FSDPStrategy maps torch's older MixedPrecision)
            return given
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

    # -- checkpoints (checkpoint_shards.py) -----------------------------------------------------------------
    def lightning_module_state_dict(self) -> dict[str, Any]:
        """The module's weights: gathered whole on rank 0 (``"full"``; the other ranks get ``{}``), or this
        rank's shards (``"sharded"``). Every rank must call it (gathering is collective)."""
        module = self._lightning_module
        if module is None:
            return {}
        if self._sharded_root is None:
            return module.state_dict()
        return _checkpoint.module_state(module, full=self.state_dict_type == "full")

    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """``"full"``: torch.optim's own layout (parameters by position), gathered on rank 0, so the file is the
        one a single process writes; ``"sharded"``: this rank's shards, by parameter name."""
        module = self._lightning_module
        if module is None or self._sharded_root is None:
            return optimizer.state_dict()
        return _checkpoint.optimizer_state(module, optimizer, full=self.state_dict_type == "full")

    def load_model_state_dict(self, checkpoint: Mapping[str, Any], strict: bool = True) -> None:
        module = self._lightning_module
        assert module is not None
        state_dict = checkpoint["state_dict"]
        if self._sharded_root is None:
            module.load_state_dict(state_dict, strict=strict)
            return
        _checkpoint.load_module_state(module, state_dict, self.world_size, strict, self._checkpoint_steps)

    def load_optimizer_states(self, states: list[Any], optimizers: list[Optimizer]) -> None:
        module = self._lightning_module
        if module is None or self._sharded_root is None:
            super().load_optimizer_states(states, optimizers)
            return
        _checkpoint.load_optimizer_states(module, states, optimizers)

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        if self.state_dict_type == "full":
            path = os.fspath(filepath)
            if self.is_global_zero and os.path.isdir(path):  # a sharded checkpoint of the same name
                self._checkpoint_steps._remove_checkpoint(path)
            super().save_checkpoint(checkpoint, filepath, storage_options=storage_options)
            return
        _checkpoint.save_sharded(self, checkpoint, filepath)

    def _stager(self) -> Any:
        return _checkpoint.stager(self)

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
        loaded = _checkpoint.load(self, checkpoint_path, weights_only)
        if loaded is None:
            return super().load_checkpoint(checkpoint_path, weights_only=weights_only)
        return loaded

    def remove_checkpoint(self, filepath: Any) -> None:
        if not _checkpoint.remove(self, filepath):
            super().remove_checkpoint(filepath)


@contextlib.contextmanager
def _no_gradient_sync(root: nn.Module) -> Iterator[None]:
    root.set_requires_gradient_sync(False)  # type: ignore[operator]
    try:
        yield
    finally:
        root.set_requires_gradient_sync(True)  # type: ignore[operator]


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


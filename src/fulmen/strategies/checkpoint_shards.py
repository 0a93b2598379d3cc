"""Checkpoints of a sharded strategy (:class:`~fulmen.strategies.sharded.ShardedStrategy`): its model and optimizer
state gathered whole (``state_dict_type="full"``: one ordinary file, written by rank 0) or kept as each rank's
shards (``"sharded"``: a torch.distributed.checkpoint directory, written in the background under
``AsyncCheckpointIO``), and either read back into the sharded module. The strategy's checkpoint methods call
these functions.

Lightning's names of the checkpoint steps (:class:`CheckpointSteps`) are looked up, when they run, in the module
the strategy's class names: this one, or :mod:`fulmen.strategies.fsdp` for ``FSDPStrategy``, so that patching
them there (as Lightning's tests do) reaches an FSDP run's checkpoints.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer

from fulmen.checkpoint import files as checkpoint_io
from fulmen.checkpoint import sharded as distributed_checkpoint
from fulmen.utilities import cloud_io
from fulmen.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from datetime import timedelta

    from fulmen.plugins.io import AsyncCheckpointIO
    from fulmen.strategies.sharded import ShardedStrategy

STATE_DICT_TYPES = ("full", "sharded")

# the process group of background sharded saves, with the default group it was made from (see checkpoint_group)
_CHECKPOINT_GROUP: tuple[Any, Any] | None = None

# Lightning's names of checkpoint steps (whether a path is a sharded checkpoint directory; fill a state dict from
# one; delete a checkpoint, directory or file), with the three functions below
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


class CheckpointSteps(Protocol):
    """The module whose names above a strategy's checkpoints call (``ShardedStrategy._checkpoint_steps``)."""

    def _is_sharded_checkpoint(self, path: Any) -> bool: ...

    def _distributed_checkpoint_load(self, state: dict[str, Any], path: str | os.PathLike[str]) -> None: ...

    def _remove_checkpoint(self, path: str | os.PathLike[str]) -> None: ...

    def _is_full_checkpoint(self, path: str | os.PathLike[str]) -> bool: ...

    def _lazy_load(self, path: str | os.PathLike[str], weights_only: bool | None = None) -> dict[str, Any]: ...

    def _load_raw_module_state(
        self, state_dict: Mapping[str, Any], module: nn.Module, world_size: int = 1, strict: bool = True
    ) -> None: ...


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


def _parameter_names(module: nn.Module) -> dict[int, str]:
    return {id(p): name for name, p in module.named_parameters()}


def _options(full: bool, **extra: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=full, cpu_offload=full, **extra)


# -- state dicts of the sharded module -----------------------------------------------------------------------
def module_state(module: nn.Module, full: bool) -> dict[str, Any]:
    """The sharded module's weights: gathered whole on rank 0 (``full``; the other ranks get ``{}``), or this
    rank's shards. Every rank must call it (gathering is collective)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module, options=_options(full))


def optimizer_state(module: nn.Module, optimizer: Optimizer, full: bool) -> dict[str, Any]:
    """``full``: torch.optim's own layout (parameters by position), gathered on rank 0, so the file is the one a
    single process writes; otherwise this rank's shards, by parameter name."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    state = get_optimizer_state_dict(module, optimizer, options=_options(full))
    return distributed_checkpoint.optimizer_state_by_position(state) if full else state


def load_module_state(
    module: nn.Module, state_dict: dict[str, Any], world_size: int, strict: bool, steps: CheckpointSteps
) -> None:
    """A checkpoint's weights into the sharded module: whole tensors (a file's) or shards (a directory's)."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict
    from torch.distributed.tensor import DTensor

    if not any(isinstance(v, DTensor) for v in state_dict.values()):
        steps._load_raw_module_state(state_dict, module, world_size, strict)
        return
    set_model_state_dict(module, state_dict, options=_options(False, strict=strict))


def load_optimizer_states(module: nn.Module, states: list[Any], optimizers: list[Optimizer]) -> None:
    """A checkpoint's optimizer states into the optimizers of the sharded module: a file's (parameters by
    position, whole tensors) or a sharded directory's (read now that the optimizers exist)."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    names = _parameter_names(module)
    for optimizer, state in zip(optimizers, states):
        if isinstance(state, _ShardedOptimizerState):
            state = state.load(module, optimizer)
            whole = False
        else:  # a file checkpoint: parameters by position, whole tensors
            order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
            state = distributed_checkpoint.optimizer_state_by_name(state, order)
            whole = True
        set_optimizer_state_dict(module, optimizer, state, options=_options(whole))


# -- saving ----------------------------------------------------------------------------------------------------
def save_sharded(strategy: ShardedStrategy, checkpoint: dict[str, Any], filepath: Any) -> None:
    """``state_dict_type="sharded"``: every rank writes its shards into the directory ``filepath``, rank 0 the
    training state beside them; in the background when the strategy's CheckpointIO is an AsyncCheckpointIO."""
    if cloud_io.is_remote(os.fspath(filepath)):  # the shards are written with local file operations
        raise MisconfigurationException(
            f"{type(strategy).__name__}(state_dict_type='sharded') writes checkpoint directories on a local or "
            f"shared file system, not to {os.fspath(filepath)!r}. Point the checkpoint's dirpath at a mounted path, "
            "or use state_dict_type='full' (one file, which remote URLs take)."
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
    is_zero = strategy.is_global_zero
    io = async_io(strategy)
    if io is None:
        meta = checkpoint if is_zero else None
        distributed_checkpoint.save_sharded(tensors, meta, filepath, is_zero, strategy.barrier)
        return
    io.wait()  # at most one save in flight, on every rank: the staging buffers are the previous save's
    meta = io.snapshot(checkpoint) if is_zero else None  # the trainer may change its dicts
    complete = distributed_checkpoint.save_sharded_async(
        tensors, meta, filepath, is_zero, strategy.barrier, checkpoint_group(strategy.timeout), strategy._stager()
    )
    io.run_in_background(complete, filepath)


def async_io(strategy: ShardedStrategy) -> AsyncCheckpointIO | None:
    """The strategy's CheckpointIO when it saves in the background (None otherwise)."""
    from fulmen.plugins.io.async_plugin import AsyncCheckpointIO

    io = strategy.checkpoint_io
    return io if isinstance(io, AsyncCheckpointIO) else None


def checkpoint_group(timeout: timedelta) -> Any:
    """A gloo process group for the background sharded saves alone: their collectives run on DCP's thread
    while training runs its own on the main one, and two threads must not share a group (the ranks could
    pair different collectives). DCP's background saves also need a CPU backend, which NCCL runs lack."""
    global _CHECKPOINT_GROUP
    world = dist.group.WORLD
    if _CHECKPOINT_GROUP is None or _CHECKPOINT_GROUP[0] is not world:  # made once per default group
        # every rank gets here in the same save (sharded saves are collective), so all make it together
        _CHECKPOINT_GROUP = (world, dist.new_group(backend="gloo", timeout=timeout))
    return _CHECKPOINT_GROUP[1]


def stager(strategy: ShardedStrategy) -> Any:
    """DCP's stager for the next background save (see :func:`distributed_checkpoint.new_stager`), kept for the
    run where the installed torch lets a stager stage again: the next save then reuses its host buffers."""
    if strategy._checkpoint_stager is not None:
        return strategy._checkpoint_stager
    made = distributed_checkpoint.new_stager(pinned=strategy.root_device.type == "cuda")
    if made is not None and distributed_checkpoint.stagers_are_reusable():
        strategy._checkpoint_stager = made
    return made


# -- loading and removing ------------------------------------------------------------------------------------
def load(strategy: ShardedStrategy, checkpoint_path: Any, weights_only: bool | None) -> dict[str, Any] | None:
    """A sharded directory: the model's shards loaded straight into the sharded module, the optimizers' left to
    read when they exist; a local full file read lazily; None: the strategy's CheckpointIO reads it."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    io = async_io(strategy)
    if io is not None:
        io.wait()  # a sharded save still being written is read once complete
    steps = strategy._checkpoint_steps
    module = strategy._lightning_module
    path = os.fspath(checkpoint_path)
    if not steps._is_sharded_checkpoint(path) or strategy._sharded_root is None:
        if steps._is_full_checkpoint(path) and reads_files_itself(strategy):
            return steps._lazy_load(path, weights_only)
        return None
    assert module is not None
    checkpoint = dict(distributed_checkpoint.read_meta(path, weights_only=weights_only))
    state = get_model_state_dict(module)
    steps._distributed_checkpoint_load({distributed_checkpoint.MODEL_KEY: state}, path)
    checkpoint["state_dict"] = state
    count = int(checkpoint.pop("sharded_optimizers", 0))
    if count:
        checkpoint["optimizer_states"] = [_ShardedOptimizerState(path, i) for i in range(count)]
    return checkpoint


def reads_files_itself(strategy: ShardedStrategy) -> bool:
    """Whether checkpoint files are read by fulmen's own reader (no user ``CheckpointIO`` to go through)."""
    from fulmen.plugins.io import TorchCheckpointIO  # fulmen.plugins loads on first use only

    io = strategy.checkpoint_io
    return type(getattr(io, "checkpoint_io", io)) is TorchCheckpointIO  # behind AsyncCheckpointIO too


def remove(strategy: ShardedStrategy, filepath: Any) -> bool:
    """Remove a checkpoint directory (after the save in flight, when saving in the background); False: the
    strategy's CheckpointIO removes ``filepath`` (a file, or not rank 0)."""
    io = async_io(strategy)
    steps = strategy._checkpoint_steps
    if strategy.is_global_zero and io is not None and strategy.state_dict_type == "sharded":
        # after the save in flight (which may be the one replacing it), and not at all if that failed
        io.run_in_background(lambda: _remove_now(io, filepath, steps), filepath, removal=True)
        return True
    if strategy.is_global_zero and os.path.isdir(os.fspath(filepath)):
        steps._remove_checkpoint(filepath)
        return True
    return False


def _remove_now(io: AsyncCheckpointIO, filepath: Any, steps: CheckpointSteps) -> None:
    if os.path.isdir(os.fspath(filepath)):
        steps._remove_checkpoint(filepath)
    else:  # a file checkpoint of an earlier state_dict_type="full" run
        io.checkpoint_io.remove_checkpoint(filepath)

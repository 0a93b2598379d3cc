"""Strategies: where the model lives and how backward, steps and collectives run.

The loops ask the strategy; they never branch on which strategy is in use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.overrides import TorchFunctionMode

from fulmen.accelerators import Accelerator
from fulmen.core.optimizer import LightningOptimizer, unwrap_optimizer
from fulmen.core.optimizers import LRSchedulerConfig, parse_configure_optimizers
from fulmen.precision import Precision
from fulmen.utilities import distributed_checkpoint
from fulmen.utilities.apply_func import move_data_to_device
from fulmen.utilities.checkpoint_io import link_through, raise_failed_save_of
from fulmen.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.plugins.io import CheckpointIO
    from fulmen.plugins.layer_sync import LayerSync
    from fulmen.runtime.hooks import HookDispatcher
    from fulmen.strategies.launchers.launcher import _Launcher


class _StepPlan(NamedTuple):
    """What a step may skip, read from the dispatcher once per run (``generation``) rather than per step."""

    generation: int
    default_transfer: bool  # no batch-transfer hook overridden
    keeps_inputs: bool  # the precision leaves inputs as they are
    plain_forward: bool  # the precision has no forward context to enter
    inline_backward: bool  # on_before_backward / backward / on_after_backward at their defaults
    plain_backward: bool  # the precision does not scale the loss
    nothing_after_closure: bool  # no hook and no clipping between backward and the step


class Strategy:
    """Base strategy: one process, one device. Subclasses add processes and collectives."""

    strategy_name = "base"
    # several processes: how long one may make no progress before the hang watchdog ends it; the collective
    # it is inside and how many it completed (what the watchdog reads)
    hang_timeout: timedelta | None = None
    in_collective: str | None = None
    collectives_done = 0

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
    ) -> None:
        self.accelerator = accelerator
        self._launcher: _Launcher | None = None  # how the run's processes start (None: this process only)
        self.precision_plugin: Precision = precision_plugin or Precision()
        self._checkpoint_io = checkpoint_io
        self._default_checkpoint_io: CheckpointIO | None = None
        # a cluster-environment plugin from Trainer(plugins=...): the launcher to read instead of detecting it
        self.cluster_plugin: Any = None
        self._lightning_module: LightningModule | None = None
        self._model: torch.nn.Module | None = None
        self.optimizers: list[Optimizer] = []
        self._lightning_optimizers: list[LightningOptimizer] = []
        self.lr_scheduler_configs: list[LRSchedulerConfig] = []
        self.optimizer_frequencies: list[int] = []  # the 1.x optimizer 'frequency' keys
        self._root_device = torch.device("cpu")
        # given by the trainer when a run sets the strategy up (see connect_run)
        self._hooks: HookDispatcher | None = None
        self._clip_val: int | float | None = None
        self._clip_algorithm: str | None = None
        self._layer_sync: LayerSync | None = None  # applied by multi-process strategies when fitting
        self._plan: _StepPlan | None = None

    # -- properties ----------------------------------------------------------------------------------
    @property
    def root_device(self) -> torch.device:
        return self._root_device

    @property
    def lightning_module(self) -> LightningModule | None:
        return self._lightning_module

    @property
    def model(self) -> torch.nn.Module | None:
        return self._model if self._model is not None else self._lightning_module

    @property
    def world_size(self) -> int:
        return 1

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def handles_gradient_accumulation(self) -> bool:
        return False

    @property
    def is_distributed(self) -> bool:
        """Whether this strategy runs several processes that communicate (DDP and its kind)."""
        return False

    @property
    def supports_inference_mode(self) -> bool:
        """Whether evaluation may run under ``torch.inference_mode`` (``Trainer(inference_mode=True)``)."""
        return True

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """How a DistributedSampler shares the data: one share per process. Model parallelism shares it per
        data-parallel group (the processes of one tensor-parallel group see the same batch)."""
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    @property
    def lightning_optimizers(self) -> list[LightningOptimizer]:
        """The optimizers wrapped in ``LightningOptimizer`` (what ``self.optimizers()`` returns in a module)."""
        return self._lightning_optimizers

    @property
    def launcher(self) -> _Launcher | None:
        """What starts the processes of a run (``None``: the run stays in this process)."""
        return self._launcher

    # -- set-up ----------------------------------------------------------------------------------------
    def launch(self, trainer: Any, function: Callable[..., Any], *args: Any) -> Any:
        """Run a stage: through the launcher, which starts the processes first, or here in this process."""
        launcher = self._launcher
        if launcher is None:
            return function(*args)
        return launcher.launch(function, *args, trainer=trainer)

    def check_launch(self, parallel_devices: list[torch.device], num_nodes: int, cluster: Any) -> None:
        """Check the processes the flags ask for against those a launcher started (one process: nothing)."""

    def connect(self, model: LightningModule) -> None:
        self._lightning_module = model
        self._model = model

    def setup_environment(self) -> None:
        if self.accelerator is not None:
            self.accelerator.setup_device(self.root_device)

    def model_to_device(self) -> None:
        assert self._lightning_module is not None
        self._lightning_module.to(self.root_device)

    def connect_run(
        self, hooks: HookDispatcher | None, gradient_clip_val: int | float | None = None,
        gradient_clip_algorithm: str | None = None, sync_batchnorm: bool | LayerSync | None = False,
    ) -> None:  # fmt: skip
        """What a run tells the strategy before it is set up: the hook dispatcher it calls the module's steps
        and backward hooks through, and the Trainer's clipping and layer-synchronisation settings (validated
        already; ``sync_batchnorm``: a ``LayerSync``, or True for ``TorchSyncBatchNorm``)."""
        self._hooks = hooks
        self._plan = None
        self._clip_val = gradient_clip_val
        self._clip_algorithm = gradient_clip_algorithm
        if sync_batchnorm is True:
            from fulmen.plugins.layer_sync import TorchSyncBatchNorm

            sync_batchnorm = TorchSyncBatchNorm()
        self._layer_sync = sync_batchnorm or None

    def setup(self, trainer: Any = None) -> None:
        """Move and convert the model; called after ``configure_model``, before optimizers are made."""
        assert self._lightning_module is not None
        if trainer is not None and self.accelerator is not None:
            self.accelerator.setup(trainer)
        self.precision_plugin.convert_module(self._lightning_module)
        self.model_to_device()

    def setup_optimizers(self, trainer: Any = None) -> None:
        """Optimizers and schedulers from the module's ``configure_optimizers`` (again when a tuner changed the
        learning rate at fit start). ``trainer`` is accepted for Lightning's signature and not used."""
        module = self._lightning_module
        assert module is not None and self._hooks is not None
        manual = not module.automatic_optimization
        optimizers, configs, frequencies, _ = parse_configure_optimizers(
            self._hooks.call_module("configure_optimizers"), manual=manual
        )
        if frequencies and manual:
            raise MisconfigurationException(
                f"configure_optimizers gave optimizer frequencies {frequencies}, which only automatic "
                "optimization uses. Under manual optimization decide in training_step which optimizer "
                "steps, and remove the 'frequency' keys."
            )
        self.set_optimizers(optimizers)
        self.lr_scheduler_configs = configs
        self.optimizer_frequencies = frequencies

    def set_optimizers(self, optimizers: list[Optimizer]) -> None:
        """Use ``optimizers`` (each wrapped in a ``LightningOptimizer`` that steps through this strategy)."""
        self.optimizers = list(optimizers)
        self._lightning_optimizers = [LightningOptimizer._to_lightning_optimizer(o, self) for o in optimizers]

    def teardown(self) -> None:
        self._hooks = None
        if self.accelerator is not None:
            self.accelerator.teardown()  # e.g. CUDA: the cached memory goes back to the driver
        self.checkpoint_io.teardown()  # e.g. AsyncCheckpointIO: wait for the last saves, raise their errors

    # -- checkpoint files ------------------------------------------------------------------------------
    @property
    def checkpoint_io(self) -> CheckpointIO:
        """How checkpoints are written, read and removed (``Trainer(plugins=[AsyncCheckpointIO()])``)."""
        if self._checkpoint_io is not None:
            return self._checkpoint_io
        if self._default_checkpoint_io is None:  # kept apart: reading the default is not choosing one
            from fulmen.plugins.io import TorchCheckpointIO  # fulmen.plugins loads on first use only

            self._default_checkpoint_io = TorchCheckpointIO()
        return self._default_checkpoint_io

    @checkpoint_io.setter
    def checkpoint_io(self, io: CheckpointIO) -> None:
        self._checkpoint_io = io

    def use_plugin_checkpoint_io(self, io: CheckpointIO) -> None:
        """The ``CheckpointIO`` of ``Trainer(plugins=[...])``; refused when the strategy was given its own, since
        one of the two would be silently ignored."""
        if self._checkpoint_io is not None and self._checkpoint_io is not io:
            raise MisconfigurationException(
                f"A CheckpointIO was given twice: to the strategy ({type(self._checkpoint_io).__name__}, "
                f"{type(self).__name__}(checkpoint_io=...)) and in Trainer(plugins=[{type(io).__name__}(...)]). "
                "Pass it in one place."
            )
        self._checkpoint_io = io

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        """Write on global rank zero only (every rank holds the same weights under DDP)."""
        if self.is_global_zero:
            self.checkpoint_io.save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    def raise_failed_checkpoint_save(self) -> None:
        """Raise the error of a checkpoint save that failed in the background (``AsyncCheckpointIO``) since the
        last call; nothing when none did. The training loop calls it once per batch, so a lost checkpoint
        stops the run at the next step instead of going unnoticed until the next save."""
        raise_failed_save_of(self.checkpoint_io)

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """The checkpoint at ``checkpoint_path`` as a dict; a sharded (FSDP) checkpoint directory is read whole
        into this process, as ``fulmen consolidate`` would write it (resharding N processes -> 1)."""
        if distributed_checkpoint.is_sharded_checkpoint(checkpoint_path):
            return distributed_checkpoint.load_consolidated(checkpoint_path)
        return self.checkpoint_io.load_checkpoint(checkpoint_path, map_location="cpu", weights_only=weights_only)

    @property
    def restore_checkpoint_after_setup(self) -> bool:
        """Whether a checkpoint is loaded after :meth:`setup` (sharded models: the shards need the sharded
        model to land in) rather than before it."""
        return False

    def optimizer_state(self, optimizer: Optimizer) -> dict[str, Any]:
        """What a checkpoint keeps of ``optimizer``."""
        return optimizer.state_dict()

    def load_model_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> None:
        module = self._lightning_module
        assert module is not None
        module.load_state_dict(state_dict, strict=strict)

    def load_optimizer_states(self, states: list[Any], optimizers: list[Optimizer]) -> None:
        """Each optimizer's state from a checkpoint (the lists are of equal length, checked by the caller)."""
        for optimizer, state in zip(optimizers, states):
            optimizer.load_state_dict(state)

    def tensor_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager[Any]:
        """Where ``Trainer.init_module`` creates a model: on this strategy's device, in the precision's dtype;
        ``empty_init=True`` skips the initialisation (the weights come from a checkpoint)."""
        stack = contextlib.ExitStack()
        stack.enter_context(self.root_device)
        stack.enter_context(self.precision_plugin.module_init_context())
        if empty_init:
            stack.enter_context(_SkipInit())
        return stack

    def remove_checkpoint(self, filepath: Any) -> None:
        if self.is_global_zero:
            self.checkpoint_io.remove_checkpoint(filepath)

    def link_checkpoint(self, target: Any, link: Any) -> None:
        """Point ``link`` at the checkpoint ``target`` (``ModelCheckpoint(save_last="link")``), on global rank
        zero, which wrote ``target``. Through the ``CheckpointIO``, so that a writer saving in the background
        makes the link only once ``target`` is complete; one without the method (written for Lightning) saves
        before returning, and the link is made at once."""
        if self.is_global_zero:
            link_through(self.checkpoint_io, target, link)

    def on_exception(self, exception: BaseException) -> None:
        """The run raised ``exception`` (not an interrupt); called before the callbacks hear of it."""

    def prepare_for_tuning(self) -> None:
        """What a tuner run before fit needs set up (several processes: their process group)."""

    def _current_plan(self, hooks: HookDispatcher) -> _StepPlan:
        """The step plan for ``hooks`` as they are now: the cached one, or a new one when the dispatcher was
        reset since (a new run, new callbacks or module). The hot loop reads the plan's fields instead of
        asking the dispatcher at every step."""
        plan = self._plan
        if plan is None or plan.generation != hooks.generation:
            plan = self._plan = self._step_plan(hooks)
        return plan

    def _step_plan(self, hooks: HookDispatcher) -> _StepPlan:
        precision = type(self.precision_plugin)
        return _StepPlan(
            generation=hooks.generation,
            default_transfer=hooks.transfer_is_default(),
            keeps_inputs=precision.convert_input is Precision.convert_input,
            plain_forward=precision.forward_context is Precision.forward_context,
            inline_backward=hooks.defaults_only("on_before_backward", "backward", "on_after_backward"),
            plain_backward=precision.pre_backward is Precision.pre_backward,
            nothing_after_closure=not self._clip_val
            and hooks.defaults_only("on_before_optimizer_step", "configure_gradient_clipping"),
        )  # fmt: skip

    # -- data ------------------------------------------------------------------------------------------
    def batch_to_device(self, batch: Any, device: torch.device | None = None, dataloader_idx: int = 0) -> Any:
        hooks = self._hooks
        device = device or self._root_device
        if hooks is None or self._lightning_module is None:
            batch = move_data_to_device(batch, device)
            return self.precision_plugin.convert_input(batch)
        plan = self._current_plan(hooks)
        if plan.default_transfer:
            batch = move_data_to_device(batch, device)
        else:
            batch = hooks.transfer_batch(batch, device, dataloader_idx)
        # '-true' precisions: floating inputs in the weights' dtype, before on_*_batch_start sees the batch
        return batch if plan.keeps_inputs else self.precision_plugin.convert_input(batch)

    # -- steps -----------------------------------------------------------------------------------------
    def _step(self, name: str, *args: Any, **kwargs: Any) -> Any:
        hooks = self._hooks
        assert hooks is not None
        precision = self.precision_plugin
        if type(precision).forward_context is Precision.forward_context:  # nothing to enter, every batch
            return hooks.call_module(name, *args, **kwargs)
        with precision.forward_context():
            return hooks.call_module(name, *args, **kwargs)

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        hooks = self._hooks
        assert hooks is not None
        plan = self._plan
        if plan is not None and plan.plain_forward and plan.generation == hooks.generation:
            return hooks.call_module("training_step", *args, **kwargs)  # per step: one call less
        return self._step("training_step", *args, **kwargs)

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._step("validation_step", *args, **kwargs)

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._step("test_step", *args, **kwargs)

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._step("predict_step", *args, **kwargs)

    def backward(self, loss: Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> Tensor:
        """on_before_backward → module.backward (scaled loss) → on_after_backward."""
        hooks = self._hooks
        assert hooks is not None
        plan = self._current_plan(hooks)
        if plan.inline_backward and not args and not kwargs:  # the default hooks, inline
            (loss if plan.plain_backward else self.precision_plugin.pre_backward(loss)).backward()
            return loss
        hooks.call_callbacks("on_before_backward", loss)
        hooks.call_module("on_before_backward", loss)
        scaled = self.precision_plugin.pre_backward(loss)
        if hooks.module_takes_optimizer_idx("backward"):  # 1.x: backward(loss, optimizer, optimizer_idx)
            idx = self.optimizer_index(optimizer) if optimizer is not None else None
            hooks.call_module("backward", scaled, optimizer, idx, *args, **kwargs)
        else:
            hooks.call_module("backward", scaled, *args, **kwargs)
        hooks.call_callbacks("on_after_backward")
        hooks.call_module("on_after_backward")
        return loss

    def optimizer_step(self, optimizer: Optimizer, closure: Callable[[], Any], **kwargs: Any) -> Any:
        hooks = self._hooks
        after: Callable[[Optimizer], None] | None = self._after_closure
        if hooks is None:
            after = None
        elif self._current_plan(hooks).nothing_after_closure:
            after = None  # no hook to call and nothing to clip between backward and the step
        return self.precision_plugin.optimizer_step(optimizer, closure, after, **kwargs)

    def _after_closure(self, optimizer: Optimizer) -> None:
        """Runs between the closure (backward done) and the step: hooks, then clipping."""
        hooks = self._hooks
        assert hooks is not None

        def index() -> int:
            return self.optimizer_index(optimizer)

        if not hooks.defaults_only("on_before_optimizer_step"):
            hooks.call_callbacks_idx("on_before_optimizer_step", index, optimizer)
            hooks.call_module_idx("on_before_optimizer_step", index, optimizer)
        module = self._lightning_module
        if module is None or not module.automatic_optimization:
            return
        if hooks.defaults_only("configure_gradient_clipping"):
            # the default hook, inline: the Trainer validated the clipping flags once
            if self._clip_val:
                self.precision_plugin.clip_gradients(optimizer, self._clip_val, self._clip_algorithm or "norm")
        else:
            hooks.call_module_idx(
                "configure_gradient_clipping",
                index,
                optimizer,
                gradient_clip_val=self._clip_val,
                gradient_clip_algorithm=self._clip_algorithm,
            )

    def optimizer_index(self, optimizer: Optimizer | LightningOptimizer) -> int:
        """Position of ``optimizer`` (or its wrapper) in what ``configure_optimizers`` returned."""
        raw = unwrap_optimizer(optimizer)
        for idx, opt in enumerate(self.optimizers):
            if opt is raw:
                return idx
        raise ValueError(f"{type(raw).__name__} is not one of the optimizers from configure_optimizers.")

    # -- collectives (identity for one process) --------------------------------------------------------
    def reduce(self, tensor: Any, group: Any = None, reduce_op: str | None = "mean") -> Any:
        return tensor

    def barrier(self, name: str | None = None) -> None:
        pass

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    def all_gather(self, tensor: Tensor, group: Any = None, sync_grads: bool = False) -> Tensor:
        return tensor

    def gather_objects(self, obj: Any) -> list[Any] | None:
        """Every process's ``obj`` (picklable), in rank order; ``None`` where the processes can no longer meet
        (the process group was left after an error)."""
        return [obj]

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return decision

    def sync_metric(self, tensor: Tensor, reduce_op: str) -> Tensor:
        return tensor

    def block_backward_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Skip gradient synchronisation inside this block (a no-op with one process)."""
        return _NO_SYNC_TO_BLOCK

    def state_dict(self) -> dict[str, Any]:
        module = self._lightning_module
        return module.state_dict() if module is not None else {}


_NO_SYNC_TO_BLOCK = contextlib.nullcontext()


class _SkipInit(TorchFunctionMode):
    """Calls to ``torch.nn.init`` functions return their tensor untouched: a model built inside is left with
    the memory its parameters were allocated with, for a checkpoint to fill (``init_module(empty_init=True)``)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs.get("tensor")
        return func(*args, **(kwargs or {}))

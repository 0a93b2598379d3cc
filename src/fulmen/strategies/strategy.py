"""Strategies: where the model lives and how backward, steps and collectives run.

The loops ask the strategy; they never branch on which strategy is in use. ``Strategy``'s checkpoint methods
(checkpointing.py), ranks and collectives (processes.py) and Lightning's no-op hooks (hooks.py) are mixins of
their own; step_plan.py decides which per-step work runs inline.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.optim import Optimizer
from torch.overrides import TorchFunctionMode

from fulmen.accelerators import Accelerator
from fulmen.core.configure_optimizers import LRSchedulerConfig, parse_configure_optimizers
from fulmen.core.optimizer import LightningOptimizer, unwrap_optimizer
from fulmen.precision import Precision
from fulmen.strategies.checkpointing import _CheckpointMixin
from fulmen.strategies.forward_redirection import _redirect
from fulmen.strategies.hooks import _HooksMixin
from fulmen.strategies.processes import _ProcessesMixin
from fulmen.strategies.step_plan import (
    _STEP_CONTEXTS,
    _has_step_context,
    _StepPlan,
    plan_steps,
    runs_straight_through,
    step_methods,
)
from fulmen.utilities.apply_func import move_data_to_device
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.plugins.io import CheckpointIO
    from fulmen.plugins.layer_sync import LayerSync
    from fulmen.runtime.hooks import HookDispatcher
    from fulmen.strategies.launchers.launcher import _Launcher


class Strategy(_CheckpointMixin, _ProcessesMixin, _HooksMixin):
    """Base strategy: one process, one device. Subclasses add processes and collectives."""

    strategy_name = "base"
    # each process holds only a shard of the parameters: no one process can serve or export the whole model
    shards_the_model = False
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
        self._accelerator = accelerator
        self._launcher: _Launcher | None = None  # how the run's processes start (None: this process only)
        self._plan: _StepPlan | None = None
        self.precision_plugin = precision_plugin  # the setter: None is full precision
        self._checkpoint_io = checkpoint_io
        self._default_checkpoint_io: CheckpointIO | None = None
        # a cluster-environment plugin from Trainer(plugins=...): the launcher to read instead of detecting it
        self.cluster_plugin: Any = None
        self._lightning_module: LightningModule | None = None
        self._model: torch.nn.Module | None = None
        # the wrapper a subclass itself puts around the module (DDP's): steps run through it its own way, while
        # another model given through the ``model`` setter gets the steps redirected through its forward
        self._strategy_wrapper: torch.nn.Module | None = None
        self._optimizers: list[Optimizer] = []
        self._lightning_optimizers: list[LightningOptimizer] = []
        self.lr_scheduler_configs: list[LRSchedulerConfig] = []
        self.optimizer_frequencies: list[int] = []  # the 1.x optimizer 'frequency' keys
        self._root_device = torch.device("cpu")
        # given by the trainer when a run sets the strategy up (see connect_run)
        self._hooks: HookDispatcher | None = None
        self._clip_val: int | float | None = None
        self._clip_algorithm: str | None = None
        self._layer_sync: LayerSync | None = None  # applied by multi-process strategies when fitting

    # -- properties ----------------------------------------------------------------------------------
    @property
    def root_device(self) -> torch.device:
        return self._root_device

    @property
    def lightning_module(self) -> LightningModule | None:
        return self._lightning_module

    @property
    def model(self) -> torch.nn.Module | None:
        """The module the steps run through: the LightningModule, or what wraps it (DDP's wrapper, or a model a
        subclass sets here, whose ``forward`` then runs the steps, as Lightning's forward redirection does)."""
        return self._model if self._model is not None else self._lightning_module

    @model.setter
    def model(self, new_model: torch.nn.Module | None) -> None:
        self._model = new_model
        self._plan = None  # how the steps run is decided again

    @property
    def accelerator(self) -> Accelerator | None:
        return self._accelerator

    @accelerator.setter
    def accelerator(self, accelerator: Accelerator | None) -> None:
        self._accelerator = accelerator

    @property
    def precision_plugin(self) -> Precision:
        """How forward, backward and the optimizer steps run in the run's precision."""
        return self._precision_plugin

    @precision_plugin.setter
    def precision_plugin(self, precision_plugin: Precision | None) -> None:
        precision = precision_plugin if precision_plugin is not None else Precision()
        precision._strategy = self
        self._precision_plugin = precision
        self._plan = None

    @property
    def optimizers(self) -> list[Optimizer]:
        """The optimizers this strategy steps (what ``configure_optimizers`` returned)."""
        return self._optimizers

    @optimizers.setter
    def optimizers(self, optimizers: list[Optimizer]) -> None:
        """Step ``optimizers`` from now on (each wrapped in a ``LightningOptimizer`` that steps through here)."""
        self._optimizers = optimizers if isinstance(optimizers, list) else list(optimizers)
        self._lightning_optimizers = [LightningOptimizer._to_lightning_optimizer(o, self) for o in self._optimizers]

    @property
    def handles_gradient_accumulation(self) -> bool:
        return False

    @property
    def supports_inference_mode(self) -> bool:
        """Whether evaluation may run under ``torch.inference_mode`` (``Trainer(inference_mode=True)``)."""
        return True

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
        self._precision_plugin._strategy = self  # its hooks run in this run (a plugin may serve several trainers)
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
        self._setup_precision_unless_fitting(trainer)

    def _setup_precision_unless_fitting(self, trainer: Any) -> None:
        """``setup_precision_plugin`` at the end of ``setup`` for a stage without optimizers; fit connects the
        precision once its optimizers exist (``setup_optimizers``)."""
        if getattr(getattr(trainer, "state", None), "fn", None) != "fit":
            self.setup_precision_plugin()

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
        self.setup_precision_plugin()

    def set_optimizers(self, optimizers: list[Optimizer]) -> None:
        """Use ``optimizers`` (each wrapped in a ``LightningOptimizer`` that steps through this strategy)."""
        self.optimizers = list(optimizers)

    def setup_precision_plugin(self) -> None:
        """Let the precision plugin see (and wrap) the model, optimizers and schedulers: ``Precision.connect``.
        Called once the optimizers exist (``setup_optimizers``; ``setup`` for a stage without them)."""
        model = self.model
        assert model is not None
        model, optimizers, lr_scheduler_configs = self.precision_plugin.connect(
            model, self.optimizers, self.lr_scheduler_configs
        )
        if model is not self.model:
            self.model = model
        current = self._optimizers
        if len(optimizers) != len(current) or any(a is not b for a, b in zip(optimizers, current)):
            self.optimizers = optimizers
        self.lr_scheduler_configs = lr_scheduler_configs

    def teardown(self) -> None:
        self._hooks = None
        self.precision_plugin.teardown()
        if self.accelerator is not None:
            self.accelerator.teardown()  # e.g. CUDA: the cached memory goes back to the driver
        self.checkpoint_io.teardown()  # e.g. AsyncCheckpointIO: wait for the last saves, raise their errors

    def tensor_init_context(self, empty_init: bool | None = None) -> contextlib.AbstractContextManager[Any]:
        """Where ``Trainer.init_module`` creates a model: on this strategy's device, in the precision's dtype;
        ``empty_init=True`` skips the initialisation (the weights come from a checkpoint)."""
        stack = contextlib.ExitStack()
        stack.enter_context(self.root_device)
        stack.enter_context(self.precision_plugin.module_init_context())
        if empty_init:
            stack.enter_context(_SkipInit())
        return stack

    @contextlib.contextmanager
    def model_sharded_context(self) -> Generator[None, None, None]:
        """Where ``configure_model`` (and the 1.x ``configure_sharded_model``) builds the layers: a strategy
        that shards them as they are created enters its context here (nothing by default)."""
        yield

    def _current_plan(self, hooks: HookDispatcher) -> _StepPlan:
        """The step plan for ``hooks`` as they are now: the cached one, or a new one when the dispatcher was
        reset since (a new run, new callbacks or module). The hot loop reads the plan's fields instead of
        asking the dispatcher at every step."""
        plan = self._plan
        if plan is None or plan.generation != hooks.generation:
            plan = self._plan = self._step_plan(hooks)
        return plan

    def _step_plan(self, hooks: HookDispatcher) -> _StepPlan:
        """A new step plan for ``hooks`` (step_plan.py reads it off this strategy, its precision and ``hooks``)."""
        return plan_steps(self, hooks, Strategy)

    @property
    def step_plan(self) -> dict[str, bool]:
        """What the steps of the last run skipped, read-only: each switch of the step plan by name (``{}`` before
        a run planned any step). Tests read it to prove that each fast path and its general twin ran."""
        fields = self._plan._asdict() if self._plan is not None else {}
        return {name: value for name, value in fields.items() if name != "generation"}

    def runs_plain_steps(self) -> bool:
        """Whether a training batch may run straight through (the module's ``training_step``, then the
        optimizer's ``zero_grad``, ``backward`` and ``step``, as a hand-written loop does) with nothing of this
        strategy's or its precision's in between: their ``training_step``, ``backward`` and ``optimizer_step``
        are the base class's (not overridden, not patched), with the default hooks, no step context, no scaled
        loss and nothing to run between backward and the step. The training loop asks once per epoch."""
        hooks = self._hooks
        if hooks is None or self._lightning_module is None:
            return False
        return runs_straight_through(self, self._current_plan(hooks), _PLAIN_STEP_METHODS)

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
    def _step_context(self, name: str) -> contextlib.AbstractContextManager[Any] | None:
        """The precision's context step ``name`` runs in (``train_step_context`` ...), or None when it has none
        to enter (neither that context nor ``forward_context`` overridden): no object per step then."""
        precision = self.precision_plugin
        if not _has_step_context(type(precision), name):
            return None
        manager: contextlib.AbstractContextManager[Any] = getattr(precision, _STEP_CONTEXTS[name])()
        return manager

    def _redirect_target(self) -> torch.nn.Module | None:
        """A model set through :attr:`model` that wraps the module (not the strategy's own wrapper): the steps
        then run through its ``forward``, as Lightning redirects them."""
        model = self._model
        if model is None or model is self._lightning_module or model is self._strategy_wrapper:
            return None
        return model

    def _call_step(self, name: str, *args: Any, **kwargs: Any) -> Any:
        hooks = self._hooks
        assert hooks is not None
        wrapper = self._redirect_target()
        if wrapper is None:
            return hooks.call_module(name, *args, **kwargs)
        module = self._lightning_module
        assert module is not None
        return _redirect(wrapper, module, lambda *a, **k: hooks.call_module(name, *a, **k), *args, **kwargs)

    def _step(self, name: str, *args: Any, **kwargs: Any) -> Any:
        context = self._step_context(name)
        if context is None:  # nothing to enter, every batch
            return self._call_step(name, *args, **kwargs)
        with context:
            return self._call_step(name, *args, **kwargs)

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

    def backward(self, closure_loss: Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> Tensor:
        """Back-propagate ``closure_loss``: :meth:`pre_backward`, then the precision plugin's ``pre_backward``
        (the loss scaled where the precision scales it; ``on_before_backward``), ``backward`` (the module's
        ``backward`` hook, with ``args`` / ``kwargs``) and ``post_backward`` (``on_after_backward``), then
        :meth:`post_backward`. Returns the loss back-propagated (detached, as ``post_backward`` returns it)."""
        hooks = self._hooks
        assert hooks is not None
        plan = self._current_plan(hooks)
        if plan.inline_backward and not args and not kwargs:  # the default hooks, inline
            if plan.strategy_pre_backward:
                self.pre_backward(closure_loss)
            if not plan.plain_backward:
                closure_loss = self.precision_plugin._scale_loss(closure_loss)
            closure_loss.backward()
            if plan.strategy_post_backward:
                closure_loss = closure_loss.detach()
                self.post_backward(closure_loss)
            return closure_loss  # not detached when nothing reads it here: a step's allocation saved
        self.pre_backward(closure_loss)
        precision = self.precision_plugin
        module = self._lightning_module
        closure_loss = precision.pre_backward(closure_loss, module)
        precision.backward(closure_loss, module, optimizer, *args, **kwargs)
        closure_loss = precision.post_backward(closure_loss, module)
        self.post_backward(closure_loss)
        return closure_loss

    def _module_backward(self, tensor: Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> None:
        """The module's ``backward`` hook through the dispatcher (``Precision.backward`` calls it)."""
        hooks = self._hooks
        assert hooks is not None
        if hooks.module_takes_optimizer_idx("backward"):  # 1.x: backward(loss, optimizer, optimizer_idx)
            idx = self.optimizer_index(optimizer) if optimizer is not None else None
            hooks.call_module("backward", tensor, optimizer, idx, *args, **kwargs)
        else:
            hooks.call_module("backward", tensor, *args, **kwargs)

    def optimizer_step(
        self, optimizer: Optimizer, closure: Callable[[], Any], model: torch.nn.Module | None = None, **kwargs: Any
    ) -> Any:
        """Step ``optimizer`` through the precision plugin: ``closure`` (training_step, backward), then
        ``on_before_optimizer_step`` and gradient clipping, then the step. ``model``: the module whose hooks
        run (this strategy's by default); ``kwargs``: ``optimizer.step``'s."""
        hooks = self._hooks
        precision = self.precision_plugin
        if hooks is None:
            return precision._optimizer_step(optimizer, closure, None, **kwargs)
        plan = self._current_plan(hooks)
        if not plan.own_precision_step:  # a subclass's optimizer_step: called as Lightning calls it
            model = model if model is not None else self._lightning_module
            return precision.optimizer_step(optimizer, model=model, closure=closure, **kwargs)
        # no hook to call and nothing to clip between backward and the step: nothing after the closure
        after = None if plan.nothing_after_closure else self._after_closure
        return precision._optimizer_step(optimizer, closure, after, **kwargs)

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
                self.precision_plugin.clip_gradients(
                    optimizer, clip_val=self._clip_val, gradient_clip_algorithm=self._clip_algorithm or "norm"
                )
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


# the methods a straight-through step stands for (runs_plain_steps), as defined here, taken before anything could
# patch the class: a subclass's override or a patch (tests patch them to watch the calls) then shows as different
_PLAIN_STEP_METHODS = step_methods(Strategy)


class _SkipInit(TorchFunctionMode):
    """Calls to ``torch.nn.init`` functions return their tensor untouched: a model built inside is left with
    the memory its parameters were allocated with, for a checkpoint to fill (``init_module(empty_init=True)``)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs.get("tensor")
        return func(*args, **(kwargs or {}))


# names Lightning's module holds, which libraries import from here; this module's code does not use them (and
# those that moved out of it to the modules of Strategy's parts, for code that imported them from here)
__getattr__ = _lazy_aliases(__name__, {
    "CheckpointIO": "fulmen.plugins.io.checkpoint_plugin.CheckpointIO",
    "TorchCheckpointIO": "fulmen.plugins.io.torch_plugin.TorchCheckpointIO",
    "TrainerFn": "fulmen.runtime.state.TrainerFn",
    "distributed_checkpoint": "fulmen.strategies.checkpointing.distributed_checkpoint",
    "link_through": "fulmen.strategies.checkpointing.link_through",
    "raise_failed_save_of": "fulmen.strategies.checkpointing.raise_failed_save_of",
    "_NO_SYNC_TO_BLOCK": "fulmen.strategies.processes._NO_SYNC_TO_BLOCK",
    "_PLAIN_PRECISION_STEP": "fulmen.strategies.step_plan._PLAIN_PRECISION_STEP",
})  # fmt: skip

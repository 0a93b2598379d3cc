"""Strategies: where the model lives and how backward, steps and collectives run.

The loops ask the strategy; they never branch on which strategy is in use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.optim import Optimizer

from fulmen.accelerators import Accelerator
from fulmen.core.optimizer import LightningOptimizer
from fulmen.precision import Precision
from fulmen.utilities.apply_func import move_data_to_device

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


class Strategy:
    """Base strategy: one process, one device. Subclasses add processes and collectives."""

    strategy_name = "base"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        precision_plugin: Precision | None = None,
    ) -> None:
        self.accelerator = accelerator
        self.precision_plugin: Precision = precision_plugin or Precision()
        self._lightning_module: LightningModule | None = None
        self._model: torch.nn.Module | None = None
        self._trainer: Trainer | None = None
        self.optimizers: list[Optimizer] = []
        self._lightning_optimizers: list[LightningOptimizer] = []
        self._root_device = torch.device("cpu")

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

    # -- set-up ----------------------------------------------------------------------------------------
    def launch(self, trainer: Trainer, function: Callable[..., Any], *args: Any) -> Any:
        """Run a stage: here, in this process (strategies that start their processes override this)."""
        return function(*args)

    def connect(self, model: LightningModule) -> None:
        self._lightning_module = model
        self._model = model

    def setup_environment(self) -> None:
        if self.accelerator is not None:
            self.accelerator.setup_device(self.root_device)

    def model_to_device(self) -> None:
        assert self._lightning_module is not None
        self._lightning_module.to(self.root_device)

    def setup(self, trainer: Trainer) -> None:
        """Move and convert the model; called after ``configure_model``, before optimizers are made."""
        self._trainer = trainer
        assert self._lightning_module is not None
        self.precision_plugin.convert_module(self._lightning_module)
        self.model_to_device()

    def setup_optimizers(self, optimizers: list[Optimizer]) -> None:
        self.optimizers = optimizers
        self._lightning_optimizers = [LightningOptimizer._to_lightning_optimizer(o, self) for o in optimizers]

    def teardown(self) -> None:
        self._trainer = None

    def on_exception(self, exception: BaseException) -> None:
        """The run raised ``exception`` (not an interrupt); called before the callbacks hear of it."""

    # -- data ------------------------------------------------------------------------------------------
    def batch_to_device(self, batch: Any, device: torch.device | None = None, dataloader_idx: int = 0) -> Any:
        model = self._lightning_module
        device = device or self._root_device
        if model is not None and self._trainer is not None:
            batch = self._trainer._hooks.transfer_batch(batch, device, dataloader_idx)
        else:
            batch = move_data_to_device(batch, device)
        # '-true' precisions: floating inputs in the weights' dtype, before on_*_batch_start sees the batch
        precision = self.precision_plugin
        # the base class keeps inputs as they are: skip the call (a subclass that overrides it is called)
        return (
            batch
            if type(precision).convert_input is Precision.convert_input
            else precision.convert_input(batch)
        )

    # -- steps -----------------------------------------------------------------------------------------
    def _step(self, name: str, *args: Any, **kwargs: Any) -> Any:
        assert self._trainer is not None
        precision = self.precision_plugin
        if type(precision).forward_context is Precision.forward_context:  # nothing to enter, every batch
            return self._trainer._hooks.call_module(name, *args, **kwargs)
        with precision.forward_context():
            return self._trainer._hooks.call_module(name, *args, **kwargs)

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._step("training_step", *args, **kwargs)

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._step("validation_step", *args, **kwargs)

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._step("test_step", *args, **kwargs)

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._step("predict_step", *args, **kwargs)

    def backward(self, loss: Tensor, optimizer: Optimizer | None, *args: Any, **kwargs: Any) -> Tensor:
        """on_before_backward → module.backward (scaled loss) → on_after_backward."""
        assert self._trainer is not None
        hooks = self._trainer._hooks
        if (
            not args
            and not kwargs
            and hooks.defaults_only("on_before_backward", "backward", "on_after_backward")
        ):
            self.precision_plugin.pre_backward(loss).backward()  # the default hooks, inline
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
        trainer = self._trainer
        after: Callable[[Optimizer], None] | None = self._after_closure
        if (
            trainer is not None
            and not trainer.gradient_clip_val
            and trainer._hooks.defaults_only("on_before_optimizer_step", "configure_gradient_clipping")
        ):
            after = None  # no hook to call and nothing to clip between backward and the step
        return self.precision_plugin.optimizer_step(optimizer, closure, after, **kwargs)

    def _after_closure(self, optimizer: Optimizer) -> None:
        """Runs between the closure (backward done) and the step: hooks, then clipping."""
        assert self._trainer is not None
        trainer = self._trainer
        hooks = trainer._hooks

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
            clip_val = trainer.gradient_clip_val
            if clip_val:
                self.precision_plugin.clip_gradients(
                    optimizer, clip_val, trainer.gradient_clip_algorithm or "norm"
                )
        else:
            hooks.call_module_idx(
                "configure_gradient_clipping",
                index,
                optimizer,
                gradient_clip_val=trainer.gradient_clip_val,
                gradient_clip_algorithm=trainer.gradient_clip_algorithm,
            )

    def optimizer_index(self, optimizer: Optimizer | LightningOptimizer) -> int:
        """Position of ``optimizer`` (or its wrapper) in what ``configure_optimizers`` returned."""
        raw = optimizer.optimizer if isinstance(optimizer, LightningOptimizer) else optimizer
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


class SingleDeviceStrategy(Strategy):
    """One process on one device (CPU, one CUDA GPU or MPS)."""

    strategy_name = "single_device"

    def __init__(
        self,
        device: torch.device | str | int = "cpu",
        accelerator: Accelerator | None = None,
        precision_plugin: Precision | None = None,
    ) -> None:
        super().__init__(accelerator=accelerator, precision_plugin=precision_plugin)
        if isinstance(device, int):
            device = torch.device("cuda", device)
        self._root_device = torch.device(device)

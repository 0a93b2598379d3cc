"""``LightningModule``: a ``torch.nn.Module`` that also says how to train, validate, test and predict."""

from __future__ import annotations

# the `X as X` imports of contextlib, copy, numbers, Mapping, BytesIO, Literal and nn only keep these names
# importable from here, as before the export and logging code moved to core/export.py and core/metric_logging.py
import weakref
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch import nn as nn
from torch.optim import Optimizer

from fulmen.core.export import ExportMixin, jit_scripting
from fulmen.core.export import jit_tracing as jit_tracing  # where the TensorBoard logger finds it
from fulmen.core.hooks import CheckpointHooks, DataHooks, ModelHooks
from fulmen.core.metric_logging import MetricLoggingMixin
from fulmen.core.mixins import DeviceDtypeModuleMixin, HyperparametersMixin
from fulmen.core.optimizer import LightningOptimizer, unwrap_optimizer
from fulmen.core.saving import load_from_checkpoint, restricted_classmethod
from fulmen.utilities.apply_func import apply_to_collection
from fulmen.utilities.apply_func import convert_to_tensors as convert_to_tensors
from fulmen.utilities.clipping import check_clip_algorithm, check_clip_val
from fulmen.utilities.cloud_io import get_filesystem as get_filesystem
from fulmen.utilities.compile import unwrap_compiled as unwrap_compiled  # where the trainer and tuner find it
from fulmen.utilities.enums import GradClipAlgorithmType as GradClipAlgorithmType
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _ONNX_AVAILABLE as _ONNX_AVAILABLE
from fulmen.utilities.imports import _ONNXSCRIPT_AVAILABLE as _ONNXSCRIPT_AVAILABLE
from fulmen.utilities.imports import _TORCH_TRT_AVAILABLE as _TORCH_TRT_AVAILABLE
from fulmen.utilities.imports import RequirementCache as RequirementCache
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import defines_default_hooks
from fulmen.utilities.rank_zero import WarningCache as WarningCache
from fulmen.utilities.rank_zero import rank_zero_deprecation as rank_zero_deprecation
from fulmen.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fulmen.loggers.logger import Logger
    from fulmen.trainer.trainer import Trainer

warning_cache = WarningCache()  # Lightning's module-level cache, for code that warns through it


@defines_default_hooks
class LightningModule(
    # the mixins first: their methods were defined on this class, before every other base's
    ExportMixin, MetricLoggingMixin, DeviceDtypeModuleMixin, HyperparametersMixin, ModelHooks, DataHooks,
    CheckpointHooks,
):
    """Organise a PyTorch model's training code: steps, optimizers and hooks.

    Subclass it, implement ``training_step`` and ``configure_optimizers`` (plus the other steps you need),
    and hand it to :class:`fulmen.Trainer`.
    """

    # where the hyperparameters live in a checkpoint (Lightning's keys)
    CHECKPOINT_HYPER_PARAMS_KEY = "hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "hparams_type"

    # load_state_dict(strict=...) when restoring checkpoints; set False for partial weights
    strict_loading: bool = True

    # properties torch.jit.script must not compile (they reach the trainer, hparams ...); scripting also
    # reads every attribute once, hence `trainer` not raising under jit_tracing
    __jit_unused_properties__: list[str] = [
        "example_input_array", "on_gpu", "current_epoch", "global_step", "global_rank", "local_rank", "logger",
        "loggers", "automatic_optimization", "trainer", "device", "dtype", "hparams", "hparams_initial",
        "log_hyperparams_enabled", "device_mesh", "fabric",
    ]  # fmt: skip

    # the Lightning Fabric attached (see `fabric`); set per instance in __init__, and here for modules unpickled
    # from older versions. Annotated for type checkers only: torch.jit.script reads class annotations
    if TYPE_CHECKING:
        _fabric: Any
    _fabric = None

    @restricted_classmethod
    def load_from_checkpoint(
        cls: Any,
        checkpoint_path: str | Path,
        map_location: Any = None,
        hparams_file: str | Path | None = None,
        strict: bool | None = None,
        weights_only: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Build the class from a checkpoint: its stored hyperparameters (``**kwargs`` override them), then its weights.

        Loads with ``weights_only=True`` (no code from the file runs); pass ``weights_only=False`` only for
        files you trust. Objects among the stored hyperparameters (a module, a function ... as
        ``save_hyperparameters`` recorded them) need that, or their classes registered with
        ``torch.serialization.add_safe_globals``: otherwise the load is refused, naming them.
        """
        return load_from_checkpoint(
            cls, checkpoint_path, map_location=map_location, hparams_file=hparams_file, strict=strict,
            weights_only=weights_only, **kwargs,
        )  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._trainer: Trainer | None = None
        # a Lightning Fabric this module was set up with (``fabric.setup(module)`` sets both)
        self._fabric = None
        self._fabric_optimizers: list[Any] = []
        self._automatic_optimization = True
        self._current_fx_name: str | None = None
        self._param_requires_grad_state: dict[Tensor, bool] = {}
        self._example_input_array: Any = None
        self._compiled_from: Any = None

    @property
    def _compiler_ctx(self) -> dict[str, Any] | None:
        """Lightning's record of a compiled module: ``{"compiler": "dynamo", "dynamo_ctx": ...}`` while its steps
        are compiled (callbacks check it before changing the module under dynamo), ``None`` otherwise."""
        compiled = self._compiled_from
        if compiled is None:
            return None
        return {"compiler": "dynamo", "dynamo_ctx": getattr(compiled, "dynamo_ctx", None)}

    # -- trainer-facing properties --------------------------------------------------------------------
    @property
    def trainer(self) -> Trainer:
        if self._fabric is not None:  # set up with a Lightning Fabric: `self.trainer.x` reads the Fabric's x
            return _TrainerFabricShim(self._fabric)  # type: ignore[return-value]
        if self._trainer is None and not jit_scripting():
            raise RuntimeError(f"{type(self).__name__} is not attached to a `Trainer`.")
        return self._trainer  # type: ignore[return-value]  # None only while torch.jit reads attributes

    @trainer.setter
    def trainer(self, trainer: Trainer | None) -> None:
        for module in self.modules():
            if isinstance(module, LightningModule):
                module._trainer = trainer

    @property
    def fabric(self) -> Any:
        """The Lightning Fabric this module was set up with (``fabric.setup(module)``), else None. While one is
        attached, ``self.trainer`` reads the Fabric's attributes, ``self.log`` / ``self.log_dict`` log through it,
        ``self.optimizers()`` are the ones it set up and ``self.manual_backward`` is its ``backward``."""
        return self._fabric

    @fabric.setter
    def fabric(self, fabric: Any) -> None:
        for child in self.children():
            if isinstance(child, LightningModule):
                child.fabric = fabric
        if fabric is not None and not isinstance(fabric, weakref.ProxyTypes):
            fabric = weakref.proxy(fabric)  # the Fabric holds the module: no reference cycle through it
        self._fabric = fabric

    @property
    def automatic_optimization(self) -> bool:
        """False when ``training_step`` steps the optimizers itself (manual optimization)."""
        return self._automatic_optimization

    @automatic_optimization.setter
    def automatic_optimization(self, value: bool) -> None:
        self._automatic_optimization = value

    @property
    def current_epoch(self) -> int:
        return self._trainer.current_epoch if self._trainer is not None else 0

    @property
    def global_step(self) -> int:
        return self._trainer.global_step if self._trainer is not None else 0

    @property
    def global_rank(self) -> int:
        return self._trainer.global_rank if self._trainer is not None else 0

    @property
    def local_rank(self) -> int:
        return self._trainer.local_rank if self._trainer is not None else 0

    @property
    def device_mesh(self) -> Any:
        """The strategy's torch DeviceMesh (``ModelParallelStrategy``: dimensions "data_parallel" and
        "tensor_parallel"; ``FSDPStrategy``: the mesh it shards over), for ``configure_model``; None otherwise."""
        trainer = self._trainer
        return getattr(trainer.strategy, "device_mesh", None) if trainer is not None else None

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    @property
    def logger(self) -> Logger | None:
        if self._fabric is not None:
            return self._fabric.logger
        return self._trainer.logger if self._trainer is not None else None

    @property
    def loggers(self) -> list[Logger]:
        if self._fabric is not None:
            return self._fabric.loggers
        return self._trainer.loggers if self._trainer is not None else []

    # -- the steps the user implements -----------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return super().forward(*args, **kwargs)

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        rank_zero_warn("`training_step` must be implemented to be used with the fulmen Trainer")

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        rank_zero_warn("`validation_step` must be implemented to be used with the fulmen Trainer")

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        rank_zero_warn("`test_step` must be implemented to be used with the fulmen Trainer")

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        """Default: ``self(batch)`` (the batch's first element for lists and tuples)."""
        batch = kwargs.get("batch", args[0] if args else None)
        return self(batch)

    def configure_optimizers(self) -> Any:
        rank_zero_warn("`configure_optimizers` must be implemented to be used with the fulmen Trainer")

    def configure_callbacks(self) -> Any:
        """Callbacks this module needs; they replace trainer callbacks of the same type."""
        return []

    # -- optimizers -------------------------------------------------------------------------------------
    def optimizers(self, use_pl_optimizer: bool = True) -> Any:
        """The optimizers from ``configure_optimizers``: one object, or a list when there are several."""
        if self._fabric is not None:
            opts: list[Any] = list(self._fabric_optimizers)
        else:
            trainer = self.trainer
            opts = list(trainer.strategy.lightning_optimizers) if use_pl_optimizer else list(trainer.optimizers)
        if len(opts) == 1:
            return opts[0]
        return opts

    def lr_schedulers(self) -> Any:
        """The schedulers from ``configure_optimizers``: None, one object, or a list."""
        configs = self.trainer.lr_scheduler_configs
        if not configs:
            return None
        schedulers = [config.scheduler for config in configs]
        return schedulers[0] if len(schedulers) == 1 else schedulers

    def manual_backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        """``loss.backward()`` through the precision plugin (scaling) and strategy (DDP sync)."""
        if self._fabric is not None:
            self._fabric.backward(loss, *args, **kwargs)
            return
        if self.automatic_optimization:
            raise MisconfigurationException(
                "manual_backward() is for manual optimization. Set `self.automatic_optimization = False` "
                "in your module's __init__, or return the loss from training_step and let the trainer "
                "call backward."
            )
        trainer = self.trainer
        trainer.strategy.backward(loss, None, *args, **kwargs)

    def backward(self, loss: Tensor, *args: Any, **kwargs: Any) -> None:
        """Override to customise the backward call; the default is ``loss.backward(*args, **kwargs)``.

        Overrides with the 1.x signature ``backward(self, loss, optimizer, optimizer_idx, *args)`` receive
        those two arguments too (and may pass them on to ``super().backward``).
        """
        if args and (
            isinstance(args[0], (Optimizer, LightningOptimizer))
            or (len(args) >= 2 and args[0] is None and (args[1] is None or isinstance(args[1], int)))
        ):
            args = args[2:]  # 1.x positional (optimizer, optimizer_idx): not loss.backward's arguments
        loss.backward(*args, **kwargs)

    def toggle_optimizer(
        self, optimizer: Optimizer | LightningOptimizer, optimizer_idx: int | None = None
    ) -> None:
        """Let only ``optimizer``'s parameters require grad; parameters of other optimizers are frozen.

        The previous ``requires_grad`` state is saved so that :meth:`untoggle_optimizer` restores it.
        ``optimizer_idx`` is accepted for the 1.x spelling ``toggle_optimizer(optimizer, optimizer_idx)``.
        """
        target = unwrap_optimizer(optimizer)
        own = {id(p) for group in target.param_groups for p in group["params"]}
        state: dict[Tensor, bool] = {}
        for opt in self.trainer.optimizers:
            if opt is target:
                continue
            for group in opt.param_groups:
                for param in group["params"]:
                    if id(param) in own or param in state:
                        continue
                    state[param] = param.requires_grad
                    param.requires_grad = False
        self._param_requires_grad_state = state

    def untoggle_optimizer(self, optimizer: Optimizer | LightningOptimizer | int) -> None:
        """Restore the ``requires_grad`` flags that :meth:`toggle_optimizer` changed.

        Takes the optimizer (2.x) or its index (the 1.x spelling ``untoggle_optimizer(optimizer_idx)``).
        """
        for param, requires_grad in self._param_requires_grad_state.items():
            param.requires_grad = requires_grad
        self._param_requires_grad_state = {}

    @contextmanager
    def toggled_optimizer(self, optimizer: Optimizer | LightningOptimizer) -> Generator[None, None, None]:
        """``toggle_optimizer`` on entry and ``untoggle_optimizer`` on exit, even when the block raises."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    def clip_gradients(
        self,
        optimizer: Optimizer | LightningOptimizer,
        gradient_clip_val: int | float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip ``optimizer``'s gradients: 'norm' (global L2 norm) or 'value' (each element)."""
        trainer = self.trainer
        if gradient_clip_val is None:
            gradient_clip_val = trainer.gradient_clip_val or 0.0
        gradient_clip_algorithm = check_clip_algorithm(
            gradient_clip_algorithm or trainer.gradient_clip_algorithm or "norm"
        )
        check_clip_val(gradient_clip_val)
        if gradient_clip_val == 0:
            return
        trainer.precision_plugin.clip_gradients(
            unwrap_optimizer(optimizer), gradient_clip_val, gradient_clip_algorithm
        )

    def configure_gradient_clipping(
        self,
        optimizer: Optimizer,
        gradient_clip_val: int | float | None = None,
        gradient_clip_algorithm: str | None = None,
        *legacy: Any,
    ) -> None:
        """Called before every optimizer step with the Trainer's clipping settings; override to customise.

        An override may use the 1.x signature ``(optimizer, optimizer_idx, gradient_clip_val,
        gradient_clip_algorithm)``; the trainer then passes the optimizer's index.
        """
        if legacy:  # super() called the 1.x way: (optimizer, optimizer_idx, gradient_clip_val, algorithm)
            gradient_clip_val, gradient_clip_algorithm = gradient_clip_algorithm, legacy[0]  # type: ignore[assignment]
        # by keyword, as Lightning calls it: an override of clip_gradients may rely on the names
        self.clip_gradients(
            optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm=gradient_clip_algorithm
        )

    def optimizer_step(
        self,
        epoch: int,
        batch_idx: int,
        optimizer: Optimizer | LightningOptimizer,
        optimizer_closure: Any = None,
        *legacy: Any,
        **legacy_kwargs: Any,
    ) -> None:
        """Step ``optimizer``; ``optimizer_closure`` runs training_step, zero_grad and backward.

        Override it with the 2.x signature above or the 1.x one, ``(epoch, batch_idx, optimizer,
        optimizer_idx, optimizer_closure, on_tpu=False, using_native_amp=False, using_lbfgs=False)``: the
        trainer reads the override's signature and calls it accordingly.
        """
        if legacy and not callable(optimizer_closure):  # super() called the 1.x way: idx, then closure
            optimizer_closure = legacy[0]
        unknown = set(legacy_kwargs) - {"optimizer_idx", "on_tpu", "using_native_amp", "using_lbfgs"}
        if unknown:
            raise TypeError(f"optimizer_step() got unexpected keyword arguments {sorted(unknown)}")
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(
        self, epoch: int, batch_idx: int, optimizer: Optimizer, optimizer_idx: int | None = None
    ) -> None:
        """Clear gradients by setting them to None; called on the first batch of each accumulation window.

        ``optimizer_idx`` is passed to overrides with the 1.x signature only.
        """
        optimizer.zero_grad(set_to_none=True)

    def lr_scheduler_step(self, scheduler: Any, metric: Any, *legacy: Any) -> None:
        """Step one scheduler; ``metric`` is the monitored value for ``ReduceLROnPlateau``-like ones.

        Overrides may use the 1.x signature ``(scheduler, optimizer_idx, metric)``.
        """
        if legacy:  # super() called the 1.x way: (scheduler, optimizer_idx, metric)
            metric = legacy[0]
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    # -- misc -------------------------------------------------------------------------------------------
    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank zero only, without breaking the progress bar."""
        trainer = self._trainer
        if trainer is not None and not trainer.is_global_zero:
            return
        bar = trainer.progress_bar_callback if trainer is not None else None
        if bar is not None and hasattr(bar, "print"):
            bar.print(*args, **kwargs)
        else:
            print(*args, **kwargs)

    # -- collectives ---------------------------------------------------------------------------------
    def all_gather(self, data: Any, group: Any = None, sync_grads: bool = False) -> Any:
        """Gather ``data`` (a tensor, number, or a dict / list / tuple of them) from every process: each
        tensor gains a leading dimension of size world_size. On one process the values come back unchanged
        (numbers as tensors). ``sync_grads``: gradients flow back through the gather."""
        if self._trainer is None:
            raise RuntimeError(
                f"{type(self).__qualname__}.all_gather() needs a Trainer to know the processes: call it during "
                "fit / validate / test / predict, or use torch.distributed.all_gather directly."
            )
        strategy = self._trainer.strategy
        device = self.device

        def to_tensor(value: Any) -> Any:
            return torch.tensor(value, device=device) if isinstance(value, (int, float, bool)) else value

        data = apply_to_collection(data, (int, float, bool), to_tensor)
        return apply_to_collection(
            data, Tensor, lambda t: strategy.all_gather(t, group=group, sync_grads=sync_grads)
        )

    def freeze(self) -> LightningModule:
        """No gradients for any parameter, and eval mode; returns the module (``model = model.freeze()``)."""
        for param in self.parameters():
            param.requires_grad = False
        return self.eval()

    def unfreeze(self) -> LightningModule:
        """Gradients for every parameter again, and train mode; returns the module."""
        for param in self.parameters():
            param.requires_grad = True
        return self.train()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_trainer"] = None  # the trainer holds processes/loggers that must not be pickled
        state["_fabric"] = None  # a weak proxy (nor would the Fabric pickle)
        return state


class _TrainerFabricShim:
    """What ``module.trainer`` is while a Lightning Fabric is attached: attributes come from the Fabric."""

    def __init__(self, fabric: Any) -> None:
        super().__init__()
        self._fabric = fabric

    def __getattr__(self, item: Any) -> Any:
        try:
            return getattr(self._fabric, item)
        except AttributeError:
            raise AttributeError(
                f"Your LightningModule code tried to access `self.trainer.{item}` but this attribute is not available"
                " when using Fabric with a LightningModule."
            ) from None


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "Callback": "fulmen.core.hooks.Callback",
    "FabricLogger": "fulmen.loggers.logger.Logger",
    "Logger": "fulmen.loggers.logger.Logger",
    "is_param_in_hook_signature": "fulmen.utilities.signature_utils.is_param_in_hook_signature",
})  # fmt: skip

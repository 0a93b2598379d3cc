"""``LightningModule``: a ``torch.nn.Module`` that also says how to train, validate, test and predict."""

from __future__ import annotations

import contextlib
import copy
import numbers
import weakref
from collections.abc import Generator, Mapping
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from fulmen.core.hooks import CheckpointHooks, DataHooks, ModelHooks
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


_SCRIPTING = False  # torch.jit is reading every attribute of the module (see jit_tracing)


@contextmanager
def jit_tracing() -> Generator[None, None, None]:
    """While ``torch.jit`` (script, trace, TensorBoard's ``add_graph``) reads every attribute of a module,
    ``module.trainer`` is None instead of an error for a module not attached to a trainer."""
    global _SCRIPTING
    previous, _SCRIPTING = _SCRIPTING, True
    try:
        yield
    finally:
        _SCRIPTING = previous


@defines_default_hooks
class LightningModule(DeviceDtypeModuleMixin, HyperparametersMixin, ModelHooks, DataHooks, CheckpointHooks):
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
    # reads every attribute once, hence `trainer` not raising while _SCRIPTING
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
        if self._trainer is None and not _SCRIPTING:
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
    def example_input_array(self) -> Any:
        return self._example_input_array

    @example_input_array.setter
    def example_input_array(self, example: Any) -> None:
        self._example_input_array = example

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

    # -- logging ----------------------------------------------------------------------------------------
    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: Any = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any | None = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        metric_attribute: str | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """Record ``value`` under ``name`` for callbacks, loggers and the progress bar.

        In training-batch hooks it defaults to per-step values (``on_step=True, on_epoch=False``); in
        validation/test and epoch hooks to an epoch aggregate (``reduce_fx``, weighted by ``batch_size``).
        """
        if self._fabric is not None:
            self._log_dict_through_fabric({name: value}, logger=logger)
            return
        trainer = self._trainer
        if trainer is None:
            rank_zero_warn(
                f"self.log({name!r}) was called on a module that is not attached to a Trainer; the value "
                "is dropped. Log from inside the trainer's hooks."
            )
            return
        results = trainer.run_context.results
        fx = self._current_fx_name
        if results is None or fx is None:
            raise MisconfigurationException(
                f"self.log({name!r}) was called in `{fx}`, where logging is not supported. Log from a step "
                "or an epoch/batch hook instead (e.g. training_step, on_train_epoch_end)."
            )
        if not isinstance(name, str):
            raise MisconfigurationException(f"self.log(name={name!r}): the name must be a str.")
        if "/dataloader_idx_" in name:  # the suffix is fulmen's to add: it would clash with the real one
            raise MisconfigurationException(
                f"You called `self.log` with the key `{name}`, but a key should not contain the dataloader index: "
                "it is added (`/dataloader_idx_N`) when several dataloaders run. Log under a name without it."
            )
        if logger is None:
            logger = True
        if metric_attribute is None and isinstance(value, nn.Module) and callable(getattr(value, "compute", None)):
            metric_attribute = self._metric_attribute(name, value)
        results.log(
            fx, name, value, self._device, prog_bar=prog_bar, logger=logger, on_step=on_step,
            on_epoch=on_epoch, reduce_fx=reduce_fx, enable_graph=enable_graph, sync_dist=sync_dist,
            sync_dist_group=sync_dist_group, add_dataloader_idx=add_dataloader_idx, batch_size=batch_size,
            metric_attribute=metric_attribute, rank_zero_only=rank_zero_only,
        )  # fmt: skip

    def _metric_attribute(self, name: str, metric: nn.Module) -> str:
        """The attribute holding a logged torchmetrics ``Metric``: it must be one of the module's, so that it
        moves to the module's device and its state is the module's (found once per metric, then cached)."""
        cache: dict[int, str] = self.__dict__.setdefault("_metric_attributes", {})
        found = cache.get(id(metric))
        if found is not None:  # an id may be reused after a metric is freed: check it still names this one
            with contextlib.suppress(AttributeError):
                if self.get_submodule(found) is metric:
                    return found
        for attribute, module in self.named_modules():
            if module is metric:
                cache[id(metric)] = attribute
                return attribute
        metrics = sorted(n for n, m in self.named_modules() if n and callable(getattr(m, "compute", None)))
        if metrics:
            raise MisconfigurationException(
                f"Could not find the `LightningModule` attribute for the `torchmetrics.Metric` logged as {name!r}. "
                f"You can fix this by calling `self.log({name}, ..., metric_attribute=name)` where `name` is one of "
                f"{metrics}, or by setting the logged metric as an attribute."
            )
        raise MisconfigurationException(
            f"Could not find the `LightningModule` attribute for the `torchmetrics.Metric` logged as {name!r}: a "
            "metric must belong to the module (to move to its device and keep its state). You can fix this by "
            "setting an attribute for the metric in your `LightningModule`, e.g. `self.acc = Accuracy(...)` in "
            "`__init__`, and logging `self.acc`."
        )

    def log_dict(
        self,
        dictionary: Mapping[str, Any],
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: Any = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any | None = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """``self.log`` for every item of ``dictionary`` with the same options."""
        if self._fabric is not None:
            self._log_dict_through_fabric(dictionary, logger=logger)
            return
        for name, value in dictionary.items():
            self.log(
                name, value, prog_bar=prog_bar, logger=logger, on_step=on_step, on_epoch=on_epoch,
                reduce_fx=reduce_fx, enable_graph=enable_graph, sync_dist=sync_dist,
                sync_dist_group=sync_dist_group, add_dataloader_idx=add_dataloader_idx,
                batch_size=batch_size, rank_zero_only=rank_zero_only,
            )  # fmt: skip

    def _log_dict_through_fabric(self, dictionary: Mapping[str, Any], logger: bool | None = None) -> None:
        """``fabric.log_dict(metrics=dictionary)`` (nothing with ``logger=False``: there is nowhere else to log)."""
        if logger is False:
            return
        if any(isinstance(v, dict) for v in dictionary.values()):
            raise ValueError(f"`self.log_dict({dictionary})` was called, but nested dictionaries cannot be logged")
        for name, value in dictionary.items():
            if not isinstance(value, (numbers.Number, Tensor)):
                raise ValueError(
                    f"`self.log({name}, {value})` was called, but `{type(value).__name__}` values cannot be logged"
                )
        assert self._fabric is not None
        self._fabric.log_dict(metrics=dictionary)

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

    # -- collectives and export ----------------------------------------------------------------------------
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

    def _export_input(self, given: Any, method: str) -> Any:
        sample = given if given is not None else self.example_input_array
        if sample is None:
            raise ValueError(
                f"{method} needs an example input: pass it ({'input_sample' if method == 'to_onnx' else 'example_inputs'}=...) "
                "or set `self.example_input_array` in your module's __init__."
            )
        return apply_to_collection(sample, Tensor, lambda t: t.to(self.device))

    @torch.no_grad()
    def to_onnx(self, file_path: str | Path | Any = None, input_sample: Any = None, **kwargs: Any) -> Any:
        """Export to ONNX with ``torch.onnx.export`` (in eval mode, restored after). ``input_sample``
        defaults to ``example_input_array``; ``kwargs`` go to ``torch.onnx.export`` (``dynamo=``,
        ``dynamic_shapes=``, ``input_names=`` ...). Returns what the exporter returns (an ``ONNXProgram``
        from torch's dynamo exporter, the default in recent torch)."""
        sample = self._export_input(input_sample, "to_onnx")
        args = sample if isinstance(sample, tuple) else (sample,)
        was_training = self.training
        self.eval()
        try:
            return torch.onnx.export(self, args, file_path, **kwargs)
        finally:
            self.train(was_training)

    @torch.no_grad()
    def to_torchscript(
        self, file_path: str | Path | None = None, method: str | None = "script", example_inputs: Any = None,
        **kwargs: Any,
    ) -> Any:  # fmt: skip
        """A TorchScript module from ``torch.jit.script`` (``method="script"``) or ``torch.jit.trace``
        (``"trace"``, with ``example_inputs`` or ``example_input_array``), made in eval mode; saved with
        ``torch.jit.save`` when ``file_path`` is given. Deprecated, with Lightning's warning: TorchScript is
        deprecated in PyTorch (``to_onnx`` or ``torch.export.export`` instead)."""
        rank_zero_deprecation(
            "`LightningModule.to_torchscript` has been deprecated in v2.7 and will be removed in v2.8. "
            "TorchScript is deprecated in PyTorch. Use `torch.export.export()` for model exporting instead. "
            "See https://pytorch.org/docs/stable/export.html for more information."
        )
        if method not in ("script", "trace"):
            raise ValueError(
                f"to_torchscript(method={method!r}): choose 'script' (compile the code) or 'trace' (record one "
                "run on example inputs)."
            )
        sample = self._export_input(example_inputs, "to_torchscript") if method == "trace" else None
        was_training = self.training
        self.eval()
        try:
            with jit_tracing():
                if method == "script":
                    scripted = torch.jit.script(self, **kwargs)
                else:
                    scripted = torch.jit.trace(self, example_inputs=sample, **kwargs)
        finally:
            self.train(was_training)
        if file_path is not None:
            torch.jit.save(scripted, file_path)
        return scripted

    @torch.no_grad()
    def to_tensorrt(
        self,
        file_path: str | Path | BytesIO | None = None,
        input_sample: Any | None = None,
        ir: Literal["default", "dynamo", "ts"] = "default",
        output_format: Literal["exported_program", "torchscript"] = "exported_program",
        retrace: bool = False,
        default_device: str | torch.device = "cuda",
        **compile_kwargs: Any,
    ) -> Any:
        """Compile with ``torch_tensorrt.compile`` (in eval mode, on a CUDA device: ``default_device`` when the
        module is elsewhere; mode and device restored after) and return the compiled module; saved to
        ``file_path`` when given (``ir="ts"``: with ``torch.jit.save``, as ``output_format="torchscript"``).
        ``input_sample`` defaults to ``example_input_array`` and goes through the batch-transfer hooks;
        ``compile_kwargs`` go to ``torch_tensorrt.compile``.

        Raises:
            ModuleNotFoundError: ``torch_tensorrt`` is not installed.
            MisconfigurationException: neither the module nor ``default_device`` is on a CUDA device.
            ValueError: no input sample, or ``ir="ts"`` with another ``output_format``.
        """
        if not _TORCH_TRT_AVAILABLE:
            raise ModuleNotFoundError(f"`{type(self).__name__}.to_tensorrt` requires `torch_tensorrt` to be installed. ")
        mode, device = self.training, self.device
        if device.type != "cuda":
            target = torch.device(default_device) if isinstance(default_device, str) else default_device
            if not torch.cuda.is_available() or target.type != "cuda":
                raise MisconfigurationException(
                    f"TensorRT only supports CUDA devices. The current device is {device}."
                    " Please set the `default_device` argument to a CUDA device."
                )
            self.to(target)
        if input_sample is None:
            if self.example_input_array is None:
                raise ValueError(
                    "Could not export to TensorRT since neither `input_sample` nor"
                    " `model.example_input_array` attribute is set."
                )
            input_sample = self.example_input_array

        import torch_tensorrt

        sample = copy.deepcopy((input_sample,) if isinstance(input_sample, Tensor) else input_sample)
        sample = self.on_before_batch_transfer(sample, 0)
        sample = self.on_after_batch_transfer(self.transfer_batch_to_device(sample, self.device, 0), 0)
        with jit_tracing() if ir == "ts" else contextlib.nullcontext():
            compiled = torch_tensorrt.compile(module=self.eval(), ir=ir, inputs=sample, **compile_kwargs)
        self.train(mode)
        self.to(device)
        if file_path is not None:
            if ir == "ts":
                if output_format != "torchscript":
                    raise ValueError(
                        "TensorRT with IR mode 'ts' only supports output format 'torchscript'."
                        f" The current output format is {output_format}."
                    )
                torch.jit.save(compiled, file_path)
            else:
                torch_tensorrt.save(compiled, file_path, inputs=sample, output_format=output_format, retrace=retrace)
        return compiled

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

"""DistributedDataParallel on ``torch.distributed``: one process per device, gloo on CPUs, NCCL on GPUs.

Processes, ranks and collectives are :class:`~fulmen.strategies.parallel.ParallelStrategy`'s. The module's
``training_step`` runs through DDP's forward (wrapped in :class:`_StepModule`), which is what lets DDP reduce
the gradients in backward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim import Optimizer

from fulmen.accelerators import Accelerator
from fulmen.core.optimizer import LightningOptimizer as LightningOptimizer
from fulmen.core.optimizer import unwrap_optimizer
from fulmen.overrides.distributed import prepare_for_backward
from fulmen.precision import Precision
from fulmen.strategies.launchers.multiprocessing import _MultiProcessingLauncher
from fulmen.strategies.parallel import ParallelStrategy
from fulmen.utilities.cluster_layout import ClusterLayout
from fulmen.utilities.exceptions import InvalidTypeError, InvalidValueError, MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_deprecation as rank_zero_deprecation
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_only as rank_zero_only
from fulmen.utilities.rank_zero import rank_zero_only as utils_rank_zero_only  # noqa: F401  (Lightning's name)
from fulmen.utilities.rank_zero import rank_zero_warn
from fulmen.utilities.seed import reset_seed as reset_seed

if TYPE_CHECKING:
    from fulmen.plugins.io import CheckpointIO

START_METHODS = ("popen", "spawn", "fork", "forkserver")
_SPAWN_NAMES = {"spawn": "ddp_spawn", "fork": "ddp_fork", "forkserver": "ddp_forkserver"}


class _StepModule(nn.Module):
    """What DDP wraps: its forward is the LightningModule's training_step, so each step goes through DDP."""

    def __init__(self, module: nn.Module, strategy: DDPStrategy) -> None:
        super().__init__()
        self.module = module
        self._strategy = [strategy]  # a list: not registered as a submodule

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        strategy = self._strategy[0]
        try:
            return strategy.call_training_step(*args, **kwargs)
        finally:
            if strategy._manual_step and isinstance(strategy._model, DistributedDataParallel):
                strategy._model.require_backward_grad_sync = False


class DDPStrategy(ParallelStrategy):
    """``strategy="ddp"``: the model replicated per process, gradients averaged in backward.

    Args:
        parallel_devices, cluster_environment, checkpoint_io, precision_plugin: as for
            :class:`~fulmen.strategies.parallel.ParallelStrategy` (by default from the Trainer's flags).
        ddp_comm_state, ddp_comm_hook, ddp_comm_wrapper: a DDP communication hook (torch's
            ``torch.distributed.algorithms.ddp_comm_hooks``, e.g. ``default_hooks.fp16_compress_hook`` or
            ``powerSGD_hook.powerSGD_hook`` with its ``PowerSGDState``), registered on the wrapped model with
            ``register_comm_hook(ddp_comm_state, hook)``; ``ddp_comm_wrapper`` wraps the hook first (e.g.
            ``default_hooks.fp16_compress_wrapper``).
        model_averaging_period: with ``ddp_comm_state=PostLocalSGDState(...)`` and
            ``ddp_comm_hook=post_localSGD_hook``: average the parameters across processes every this many
            optimizer steps once local SGD has started (torch's ``PeriodicModelAverager``).
        process_group_backend, timeout: the process group's (NCCL on CUDA and gloo elsewhere by default).
        start_method: ``"popen"`` runs the script again for the other processes (or finds those torchrun /
            srun started); ``"spawn"``, ``"fork"`` and ``"forkserver"`` start them with
            ``torch.multiprocessing`` inside ``fit`` (``strategy="ddp_spawn"`` / ``"ddp_fork"``).
        **kwargs: ``DistributedDataParallel``'s own arguments: ``find_unused_parameters``, ``static_graph``,
            ``gradient_as_bucket_view``, ``bucket_cap_mb`` ...
    """

    strategy_name = "ddp"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: Any = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: Precision | None = None,
        ddp_comm_state: object | None = None,
        ddp_comm_hook: Callable[..., Any] | None = None,
        ddp_comm_wrapper: Callable[..., Any] | None = None,
        model_averaging_period: int | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta = timedelta(minutes=30),
        start_method: str = "popen",
        **kwargs: Any,
    ) -> None:
        if start_method not in START_METHODS:
            raise InvalidValueError(
                f"{type(self).__name__}(start_method={start_method!r}) is not a start method; use one of "
                f"{list(START_METHODS)}."
            )
        for name, value in (("ddp_comm_hook", ddp_comm_hook), ("ddp_comm_wrapper", ddp_comm_wrapper)):
            if value is not None and not callable(value):
                raise InvalidTypeError(
                    f"{type(self).__name__}({name}={value!r}) must be a callable, such as torch's "
                    "torch.distributed.algorithms.ddp_comm_hooks.default_hooks.allreduce_hook."
                )
        if model_averaging_period is not None and (
            isinstance(model_averaging_period, bool)
            or not isinstance(model_averaging_period, int)
            or model_averaging_period < 1
        ):
            raise InvalidValueError(
                f"{type(self).__name__}(model_averaging_period={model_averaging_period!r}) must be a positive "
                "number of optimizer steps, or None."
            )
        super().__init__(
            accelerator=accelerator, parallel_devices=parallel_devices, cluster_environment=cluster_environment,
            checkpoint_io=checkpoint_io, precision_plugin=precision_plugin,
            process_group_backend=process_group_backend, timeout=timeout,
        )  # fmt: skip
        self._ddp_kwargs: dict[str, Any] = kwargs
        self._ddp_comm_state = ddp_comm_state
        self._ddp_comm_hook = ddp_comm_hook
        self._ddp_comm_wrapper = ddp_comm_wrapper
        self._model_averaging_period = model_averaging_period
        self._model_averager: Any = None  # torch's PeriodicModelAverager, under post-local SGD
        self._start_method = start_method
        if start_method != "popen":
            self.strategy_name = _SPAWN_NAMES[start_method]
        self._manual_step = False  # a manual-optimization training_step is running inside DDP's forward

    @property
    def start_method(self) -> str:
        return self._start_method

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Lightning's names for DDP (``"ddp"``, ``"ddp_spawn"``, ``"ddp_fork"``, ``"ddp_notebook"`` and their
        ``_find_unused_parameters_true`` / ``_false`` forms), each built from this class."""
        launches = (("ddp", "popen"), ("ddp_spawn", "spawn"), ("ddp_fork", "fork"), ("ddp_notebook", "fork"))
        for name, start_method in launches:
            strategy_registry.register(
                name, cls, description=f"DDP strategy with `start_method` '{start_method}'", start_method=start_method
            )
        for name, start_method in launches:
            for unused in (False, True):
                strategy_registry.register(
                    f"{name}_find_unused_parameters_{str(unused).lower()}", cls,
                    description=f"DDP strategy with `find_unused_parameters` as {unused} and `start_method` '{start_method}'",
                    find_unused_parameters=unused, start_method=start_method,
                )  # fmt: skip

    @property
    def _spawns(self) -> bool:
        """Whether fit starts the processes with torch.multiprocessing (rather than running the script again)."""
        return self._start_method != "popen"

    # -- launch -----------------------------------------------------------------------------------------
    def check_launch(
        self, parallel_devices: list[torch.device], num_nodes: int, cluster: ClusterLayout | None
    ) -> None:
        if not self._spawns:
            super().check_launch(parallel_devices, num_nodes, cluster)
            return
        if cluster is not None:
            raise MisconfigurationException(
                f"strategy={self.strategy_name!r} starts its own processes, but this one was already started by "
                f"{cluster.launcher} (one of {cluster.world_size}). Use strategy='ddp' under a launcher."
            )
        if num_nodes > 1:
            raise MisconfigurationException(
                f"strategy={self.strategy_name!r} starts processes on this machine only, but num_nodes={num_nodes}. "
                "For several machines use strategy='ddp' with torchrun or SLURM."
            )
        self.parallel_devices = list(self._given_devices or parallel_devices)
        self._devices, self.num_nodes = len(self.parallel_devices), 1
        self._launcher = _MultiProcessingLauncher(self, start_method=self._start_method)

    def setup_environment(self) -> None:
        launcher = self._launcher
        if self._spawns and not (isinstance(launcher, _MultiProcessingLauncher) and launcher.in_worker):
            raise MisconfigurationException(
                f"strategy={self.strategy_name!r} runs inside the processes it starts; call trainer.fit/validate/"
                "test/predict, which start them."
            )
        super().setup_environment()

    def prepare_for_tuning(self) -> None:
        """The process group for a tuner run before fit; none when the processes exist only inside fit
        (``start_method`` other than ``"popen"``: the tuner run is then this process's alone)."""
        if not self._spawns:
            super().prepare_for_tuning()

    def determine_ddp_device_ids(self) -> list[int] | None:
        """The device DDP puts this process's replica on (``None`` on CPUs)."""
        return None if self._root_device.type == "cpu" else [self._root_device.index]

    def _register_ddp_hooks(self, model: DistributedDataParallel) -> None:
        """``ddp_comm_hook`` (wrapped by ``ddp_comm_wrapper``), registered on the DDP model: on every backend,
        gloo included, so a hook a user tests on CPUs runs there as it will on GPUs."""
        hook = self._ddp_comm_hook
        if hook is None:
            if self._ddp_comm_wrapper is not None:
                rank_zero_warn(
                    f"{type(self).__name__}(ddp_comm_wrapper=...) has no effect without ddp_comm_hook: it wraps "
                    "that hook. Pass ddp_comm_hook too."
                )
            return
        if self._ddp_comm_wrapper is not None:
            hook = self._ddp_comm_wrapper(hook)
        model.register_comm_hook(state=self._ddp_comm_state, hook=hook)

    def call_training_step(self, *args: Any, **kwargs: Any) -> Any:
        """The module's ``training_step`` through the dispatcher (what DDP's forward runs)."""
        assert self._hooks is not None
        return self._hooks.call_module("training_step", *args, **kwargs)

    def setup(self, trainer: Any = None) -> None:
        module = self._lightning_module
        assert module is not None
        # e.g. BatchNorm statistics over the global batch; before the optimizers exist, so they hold the new layers
        self._sync_layers(module)
        super().setup(trainer)
        self.configure_ddp()

    def configure_ddp(self) -> None:
        """Wrap the module in ``DistributedDataParallel`` (its ``training_step`` runs as the wrapper's forward)
        and register the communication hook: the model the steps run through from now on."""
        module = self._lightning_module
        assert module is not None
        model = DistributedDataParallel(
            _StepModule(module, self), device_ids=self.determine_ddp_device_ids(), **self._ddp_kwargs
        )
        self._register_ddp_hooks(model)
        self._strategy_wrapper = model
        self.model = model

    def setup_optimizers(self, trainer: Any = None) -> None:
        super().setup_optimizers(trainer)
        self._model_averager = self._make_model_averager()

    def _make_model_averager(self) -> Any:
        """Under post-local SGD (``ddp_comm_state`` a ``PostLocalSGDState``) the averager that brings the
        processes' parameters together every ``model_averaging_period`` steps; otherwise ``None``."""
        from torch.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState

        state = self._ddp_comm_state
        if not isinstance(state, PostLocalSGDState):
            if self._model_averaging_period is not None:
                rank_zero_warn(
                    f"{type(self).__name__}(model_averaging_period={self._model_averaging_period}) has no effect "
                    "without post-local SGD: pass ddp_comm_state=PostLocalSGDState(...) and "
                    "ddp_comm_hook=post_localSGD_hook as well."
                )
            return None
        if self._model_averaging_period is None:
            raise InvalidValueError(
                f"{type(self).__name__}(ddp_comm_state=PostLocalSGDState(...)) runs post-local SGD, which averages "
                "the parameters every few steps: pass model_averaging_period=<steps> as well."
            )
        from torch.distributed.optim import PostLocalSGDOptimizer, ZeroRedundancyOptimizer

        for optimizer in self.optimizers:
            if isinstance(optimizer, (ZeroRedundancyOptimizer, PostLocalSGDOptimizer)):
                raise InvalidValueError(
                    f"model_averaging_period={self._model_averaging_period} averages the parameters after each "
                    f"step, which a distributed optimizer ({type(optimizer).__name__}) does on its own. Use a "
                    "plain optimizer, or leave model averaging out."
                )
        from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager

        return PeriodicModelAverager(period=self._model_averaging_period, warmup_steps=state.start_localSGD_iter)

    def optimizer_step(
        self, optimizer: Optimizer, closure: Callable[[], Any], model: nn.Module | None = None, **kwargs: Any
    ) -> Any:
        output = super().optimizer_step(optimizer, closure, model, **kwargs)
        averager = self._model_averager
        if averager is not None:
            raw = unwrap_optimizer(optimizer)
            params = [p for group in raw.param_groups for p in group["params"] if p.grad is not None]
            averager.average_parameters(iter(params))
        return output

    def teardown(self) -> None:
        self._model = module = self._lightning_module
        self._strategy_wrapper = None
        if module is not None:  # plain layers again once the fit is over
            self._sync_layers(module, undo=True)
        self._layer_sync = None
        super().teardown()

    # -- steps ------------------------------------------------------------------------------------------
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        model = self._model
        if not isinstance(model, DistributedDataParallel):  # before setup, or after teardown
            return super().training_step(*args, **kwargs)
        module = self._lightning_module
        if module is None or module.automatic_optimization:
            with self.precision_plugin.train_step_context():
                return model(*args, **kwargs)
        # manual optimization: the backward passes already ran (armed by _prepare_reduction); DDP must not arm
        # its reducer again when this forward returns, or the next step's first backward would be reduced even
        # under no_sync. Grad sync is off while DDP finishes the forward, on again for the next one.
        self._manual_step = True
        try:
            with self.precision_plugin.train_step_context():
                return model(*args, **kwargs)
        finally:
            self._manual_step = False
            model.require_backward_grad_sync = True
            model.require_forward_param_sync = True  # buffers are still broadcast at the next forward

    def pre_backward(self, closure_loss: Tensor) -> None:
        """Under manual optimization, arm DDP's gradient reduction for this backward (see below)."""
        module = self._lightning_module
        if module is not None and not module.automatic_optimization:
            self._prepare_reduction(closure_loss)

    def _prepare_reduction(self, loss: Tensor) -> None:
        """Arm DDP's gradient reduction for a ``manual_backward`` call.

        DDP arms its reducer when its forward returns, but under manual optimization the backward passes run
        inside that forward (``training_step``), and there may be several (one per optimizer). Each backward
        is armed here instead; without it the gradients would stay local to each process.
        """
        model = self._model
        if isinstance(model, DistributedDataParallel):
            prepare_for_backward(model, loss)

    def block_backward_sync(self) -> contextlib.AbstractContextManager[Any]:
        """DDP's ``no_sync``: batches that only accumulate keep their gradients local."""
        model = self._model
        if isinstance(model, DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "CheckpointIO": "fulmen.plugins.io.checkpoint_plugin.CheckpointIO",
    "ClusterEnvironment": "fulmen.plugins.environments.ClusterEnvironment",
    "TrainerFn": "fulmen.runtime.state.TrainerFn",
})  # fmt: skip

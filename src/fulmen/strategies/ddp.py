"""DistributedDataParallel on ``torch.distributed``: one process per device, gloo on CPUs, NCCL on GPUs.

Processes, ranks and collectives are :class:`~fulmen.strategies.parallel.ParallelStrategy`'s. The module's
``training_step`` runs through DDP's forward (wrapped in :class:`_StepModule`), which is what lets DDP reduce
the gradients in backward.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel

from fulmen.accelerators import Accelerator
from fulmen.precision import Precision
from fulmen.strategies.parallel import ParallelStrategy


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

    ``find_unused_parameters``, ``static_graph``, ``gradient_as_bucket_view`` and any further keyword go to
    ``DistributedDataParallel``; ``process_group_backend`` defaults to NCCL on CUDA and gloo elsewhere.
    """

    strategy_name = "ddp"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        precision_plugin: Precision | None = None,
        process_group_backend: str | None = None,
        timeout: timedelta = timedelta(minutes=30),
        find_unused_parameters: bool = False,
        static_graph: bool = False,
        gradient_as_bucket_view: bool = False,
        **ddp_kwargs: Any,
    ) -> None:
        super().__init__(accelerator=accelerator, precision_plugin=precision_plugin,
                         process_group_backend=process_group_backend, timeout=timeout)  # fmt: skip
        self._ddp_kwargs: dict[str, Any] = {
            "find_unused_parameters": find_unused_parameters,
            "static_graph": static_graph,
            "gradient_as_bucket_view": gradient_as_bucket_view,
            **ddp_kwargs,
        }
        self._manual_step = False  # a manual-optimization training_step is running inside DDP's forward

    def call_training_step(self, *args: Any, **kwargs: Any) -> Any:
        """The module's ``training_step`` through the dispatcher (what DDP's forward runs)."""
        assert self._hooks is not None
        return self._hooks.call_module("training_step", *args, **kwargs)

    def setup(self, trainer: Any = None) -> None:
        module = self._lightning_module
        assert module is not None
        if self._sync_batchnorm:
            # BatchNorm statistics over the global batch; before the optimizers exist, so they hold the new layers
            converted = nn.SyncBatchNorm.convert_sync_batchnorm(module)
            assert (
                converted is module
            )  # a LightningModule is not itself a BatchNorm: its children were swapped
        super().setup(trainer)
        device_ids = [self._root_device.index] if self._root_device.type == "cuda" else None
        self._model = DistributedDataParallel(
            _StepModule(module, self), device_ids=device_ids, **self._ddp_kwargs
        )

    def teardown(self) -> None:
        self._model = self._lightning_module
        super().teardown()

    # -- steps ------------------------------------------------------------------------------------------
    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        model = self._model
        if not isinstance(model, DistributedDataParallel):  # before setup, or after teardown
            return super().training_step(*args, **kwargs)
        module = self._lightning_module
        if module is None or module.automatic_optimization:
            with self.precision_plugin.forward_context():
                return model(*args, **kwargs)
        # manual optimization: the backward passes already ran (armed by _prepare_reduction); DDP must not arm
        # its reducer again when this forward returns, or the next step's first backward would be reduced even
        # under no_sync. Grad sync is off while DDP finishes the forward, on again for the next one.
        self._manual_step = True
        try:
            with self.precision_plugin.forward_context():
                return model(*args, **kwargs)
        finally:
            self._manual_step = False
            model.require_backward_grad_sync = True
            model.require_forward_param_sync = True  # buffers are still broadcast at the next forward

    def backward(self, loss: Tensor, optimizer: Any, *args: Any, **kwargs: Any) -> Tensor:
        module = self._lightning_module
        if module is not None and not module.automatic_optimization:
            self._prepare_reduction(loss)
        return super().backward(loss, optimizer, *args, **kwargs)

    def _prepare_reduction(self, loss: Tensor) -> None:
        """Arm DDP's gradient reduction for a ``manual_backward`` call.

        DDP arms its reducer when its forward returns, but under manual optimization the backward passes run
        inside that forward (``training_step``), and there may be several (one per optimizer). Each backward
        is armed here instead; without it the gradients would stay local to each process.
        """
        model = self._model
        if not isinstance(model, DistributedDataParallel):
            return
        if not (torch.is_grad_enabled() and model.require_backward_grad_sync):  # inside no_sync: stay local
            model.require_forward_param_sync = False
            return
        model.require_forward_param_sync = True
        # with find_unused_parameters the reducer walks the graph from the loss to find what it must not wait
        # for (e.g. the parameters toggle_model froze); otherwise every parameter is expected to get a gradient
        roots = [loss] if model.find_unused_parameters and not model.static_graph else []
        reducer = model.reducer
        # the bucket order learnt in the first backward is applied before the next one records it again
        reducer._rebuild_buckets()
        reducer.prepare_for_backward(roots)

    def block_backward_sync(self) -> contextlib.AbstractContextManager[Any]:
        """DDP's ``no_sync``: batches that only accumulate keep their gradients local."""
        model = self._model
        if isinstance(model, DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()

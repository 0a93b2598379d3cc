"""``ThroughputMonitor``: batches, samples, items and FLOPs per second, per device and for the whole job.

FLOPs: set ``pl_module.flops_per_batch`` (e.g. in ``configure_model``, from
``fulmen.utilities.throughput.measure_flops``, which counts with ``torch.utils.flop_counter``); with
``available_flops`` (per device) the model FLOPs utilisation ``mfu`` is logged too.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from fulmen.core.hooks import Callback
from fulmen.precision import DoublePrecision as DoublePrecision
from fulmen.precision import HalfPrecision as HalfPrecision
from fulmen.precision import MixedPrecision as MixedPrecision
from fulmen.precision import Precision as FabricPrecision  # noqa: F401  (Lightning's name)
from fulmen.precision import Precision as Precision
from fulmen.runtime.state import RunningStage as RunningStage
from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_only as rank_zero_only
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.throughput import _plugin_to_compute_dtype
from fulmen.utilities.throughput import _plugin_to_compute_dtype as fabric_plugin_to_compute_dtype  # noqa: F401  (Lightning's name)
from fulmen.utilities.throughput import get_available_flops as get_available_flops

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer import Trainer


class Throughput:
    """Running counts and the rates over the last ``window_size`` updates."""

    def __init__(self, available_flops: float | None = None, world_size: int = 1, window_size: int = 100,
                 separator: str = "/") -> None:  # fmt: skip  # Lightning Fabric's order
        if window_size < 2:
            raise ValueError(f"Throughput(window_size={window_size!r}) must be at least 2: a rate needs two points.")
        self.available_flops = available_flops
        self.world_size = world_size
        self.separator = separator
        self._points: deque[tuple[float, int, int, int, float]] = deque(maxlen=window_size)

    def update(self, *, time: float, batches: int, samples: int, lengths: int = 0, flops: float = 0.0) -> None:
        """``time`` since the start; ``batches``, ``samples``, ``lengths`` (items) as running totals on this
        device; ``flops`` done by the latest batch on this device."""
        self._points.append((time, batches, samples, lengths, flops))

    def compute(self) -> dict[str, float]:
        sep = self.separator
        last = self._points[-1]
        out: dict[str, float] = {"time": last[0], "batches": last[1], "samples": last[2]}
        if last[3]:
            out["lengths"] = last[3]
        if len(self._points) < (self._points.maxlen or 0):
            return out
        first = self._points[0]
        elapsed = last[0] - first[0]
        if elapsed <= 0:
            return out
        rates = {"batches_per_sec": (last[1] - first[1]) / elapsed, "samples_per_sec": (last[2] - first[2]) / elapsed}
        if last[3]:
            rates["items_per_sec"] = (last[3] - first[3]) / elapsed
        flops = sum(point[4] for point in list(self._points)[1:])
        if flops:
            rates["flops_per_sec"] = flops / elapsed
            if self.available_flops:
                rates["mfu"] = rates["flops_per_sec"] / self.available_flops
        for key, value in rates.items():
            out[f"device{sep}{key}"] = value
            if self.world_size > 1:  # the whole job: every device does the same
                out[key] = value * self.world_size
        return out


class ThroughputMonitor(Callback):
    """Log throughput at the trainer's logging steps during training and at the end of each validation / test
    / predict run: ``<stage>/time``, ``<stage>/batches``, ``<stage>/samples`` (``<stage>/lengths`` with
    ``length_fn``), and once ``window_size`` batches were seen, ``<stage>/device/batches_per_sec``,
    ``samples_per_sec``, ``items_per_sec``, ``flops_per_sec`` and ``mfu`` (the same without ``device/`` for
    the whole job under several processes). ``batch_size_fn(batch)`` gives a batch's sample count,
    ``length_fn(batch)`` its item count (tokens, say). ``kwargs``: ``window_size=100``, ``available_flops``,
    ``separator``. On a GPU the timing waits for the device at each batch end (a sync per batch: the price of
    measuring what the device does)."""

    def __init__(self, batch_size_fn: Callable[[Any], int], length_fn: Callable[[Any], int] | None = None,
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__()  # cooperative (a mixin's __init__ after this class runs), as Lightning's
        if not callable(batch_size_fn):
            raise TypeError(f"ThroughputMonitor(batch_size_fn={batch_size_fn!r}) must be a function of the batch.")
        self.batch_size_fn = batch_size_fn
        self.length_fn = length_fn
        self.kwargs = kwargs
        self._throughputs: dict[str, Throughput] = {}
        self._t0s: dict[str, float] = {}
        self._counts: dict[str, list[int]] = {}
        self._paused = 0.0

    def _start(self, trainer: Trainer, stage: str) -> None:
        kwargs = {"world_size": trainer.world_size, **self.kwargs}
        if kwargs.get("available_flops") is None:
            # the device's peak in the precision's compute dtype, as Lightning finds it (None where unknown, e.g.
            # a CPU); `get_available_flops` is read as this module's name, so patching it counts
            dtype = _plugin_to_compute_dtype(trainer.precision_plugin)
            kwargs["available_flops"] = get_available_flops(trainer.strategy.root_device, dtype)
        self._throughputs[stage] = Throughput(**kwargs)
        self._counts[stage] = [0, 0, 0]
        self._t0s[stage] = time.perf_counter()

    def _update(self, trainer: Trainer, pl_module: LightningModule, stage: str, batch: Any) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize(trainer.strategy.root_device)
        counts = self._counts[stage]
        counts[0] += 1
        counts[1] += int(self.batch_size_fn(batch))
        if self.length_fn is not None:
            counts[2] += int(self.length_fn(batch))
        flops = float(getattr(pl_module, "flops_per_batch", 0) or 0)
        self._throughputs[stage].update(time=time.perf_counter() - self._t0s[stage], batches=counts[0],
                                        samples=counts[1], lengths=counts[2], flops=flops)  # fmt: skip

    def _log(self, trainer: Trainer, stage: str, step: int) -> None:
        sep = self.kwargs.get("separator", "/")
        metrics = {f"{stage}{sep}{key}": value for key, value in self._throughputs[stage].compute().items()}
        # through the trainer, as Lightning does: trainer.logged_metrics has them, training rows carry the epoch
        trainer.run_context.metrics.log_metrics(metrics, step=step, with_epoch=stage == "train")

    # -- training --------------------------------------------------------------------------------------
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._start(trainer, "train")

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.fit_loop.epoch_loop.accumulation_window_open:
            return  # count optimizer steps: a batch that only accumulates is part of the next one
        self._update(trainer, pl_module, "train", batch)
        if trainer.run_context.metrics.should_log_step():
            self._log(trainer, "train", trainer.run_context.progress.batches_that_stepped)

    # -- evaluation ------------------------------------------------------------------------------------
    def _eval_start(self, trainer: Trainer, stage: str) -> None:
        if not trainer.sanity_checking:
            self._start(trainer, stage)

    def _eval_batch_end(self, trainer: Trainer, pl_module: LightningModule, stage: str, batch: Any) -> None:
        if not trainer.sanity_checking:
            self._update(trainer, pl_module, stage, batch)

    def _eval_end(self, trainer: Trainer, stage: str) -> None:
        if not trainer.sanity_checking and stage in self._throughputs and self._counts[stage][0]:
            self._log(trainer, stage, self._counts[stage][0])

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._paused = time.perf_counter()
        self._eval_start(trainer, "validate")

    def on_validation_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._eval_batch_end(trainer, pl_module, "validate", batch)

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_end(trainer, "validate")
        if "train" in self._t0s and not trainer.sanity_checking:
            self._t0s["train"] += time.perf_counter() - self._paused  # validation time is not training time

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_start(trainer, "test")

    def on_test_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._eval_batch_end(trainer, pl_module, "test", batch)

    def on_test_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_end(trainer, "test")

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_start(trainer, "predict")

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self._eval_batch_end(trainer, pl_module, "predict", batch)

    def on_predict_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._eval_end(trainer, "predict")


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "BitsandbytesPrecision": "fulmen.plugins.precision.bitsandbytes.BitsandbytesPrecision",
    "DeepSpeedPrecision": "fulmen.plugins.precision.deepspeed.DeepSpeedPrecision",
    "FSDPPrecision": "fulmen.plugins.precision.fsdp.FSDPPrecision",
    "TransformerEnginePrecision": "fulmen.plugins.precision.transformer_engine.TransformerEnginePrecision",
    "XLAPrecision": "fulmen.plugins.precision.xla.XLAPrecision",
})  # fmt: skip

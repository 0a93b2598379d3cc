"""One logged key of ``self.log``: its options (:class:`LogMeta`) and its values (:class:`ResultMetric`).

A :class:`ResultMetric` keeps the key's last step value as logged (detached) and accumulates its epoch value with
tensor ops on the device (weighted sum + count for a mean; sum, max or min otherwise), reduced across processes
when the key asks for it. :class:`~fulmen.runtime.results.ResultCollection` holds one per key of a stage run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from fulmen.utilities.apply_func import apply_to_collection, move_data_to_device
from fulmen.utilities.exceptions import MisconfigurationException

_REDUCE_NAMES = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min"}
# the builtins too: ``reduce_fx=max`` is how Lightning's docs and users often write it
_TORCH_REDUCE = {torch.mean: "mean", torch.sum: "sum", torch.max: "max", torch.min: "min", sum: "sum", max: "max",
                 min: "min"}  # fmt: skip


def _parse_reduce_fx(reduce_fx: str | Callable[..., Any]) -> str:
    if isinstance(reduce_fx, str) and reduce_fx.lower() in _REDUCE_NAMES:
        return _REDUCE_NAMES[reduce_fx.lower()]
    if callable(reduce_fx) and reduce_fx in _TORCH_REDUCE:
        return _TORCH_REDUCE[reduce_fx]
    raise MisconfigurationException(
        f"Only `self.log(..., reduce_fx={{min,max,mean,sum}})` are supported, got reduce_fx={reduce_fx!r}. Use 'mean', "
        "'sum', 'max' or 'min' (or torch.mean / torch.sum / torch.max / torch.min, or the builtins sum / max / min)."
    )


@dataclass(frozen=True)
class SyncSpec:
    """Whether (and in which group) a logged value is reduced across processes."""

    should: bool
    group: Any = None


@dataclass(frozen=True)
class LogMeta:
    fx: str
    name: str
    prog_bar: bool
    logger: bool
    on_step: bool
    on_epoch: bool
    reduce_fx: str
    enable_graph: bool
    sync_dist: bool
    sync_dist_group: Any
    dataloader_idx: int | None
    add_dataloader_idx: bool
    rank_zero_only: bool
    metric_attribute: str | None = None

    @property
    def sync(self) -> SyncSpec:
        """How the value is reduced across processes (Lightning's ``meta.sync``): ``should`` is whether it is,
        i.e. ``sync_dist=True`` and a process group is running."""
        running = torch.distributed.is_available() and torch.distributed.is_initialized()
        return SyncSpec(should=self.sync_dist and running, group=self.sync_dist_group)

    @property
    def _suffix(self) -> str:
        return f"/dataloader_idx_{self.dataloader_idx}" if self.add_dataloader_idx and self.dataloader_idx is not None else ""

    @property
    def display_name(self) -> str:
        return self.name + self._suffix

    @property
    def step_name(self) -> str:
        """``loss_step`` when both a step and an epoch value are kept; the dataloader suffix comes last
        (``loss_step/dataloader_idx_1``), as in Lightning."""
        return f"{self.name}_step{self._suffix}" if self.on_step and self.on_epoch else self.display_name

    @property
    def epoch_name(self) -> str:
        return f"{self.name}_epoch{self._suffix}" if self.on_step and self.on_epoch else self.display_name


class ResultMetric:
    """One logged key: its last step value and its running epoch aggregate (both on device)."""

    __slots__ = ("_computed", "count", "epoch_acc", "meta", "metric", "metric_released", "step_value", "updated")

    def __init__(self, meta: LogMeta) -> None:
        self.meta = meta
        self.step_value: torch.Tensor | None = None
        self.epoch_acc: torch.Tensor | None = None
        self.count: torch.Tensor | int = 0
        self.metric: Any = None
        self.metric_released = False  # the Metric's state was reset at the end of its run (release_metrics)
        self._computed: torch.Tensor | None = None
        self.updated = False

    @property
    def is_tensor(self) -> bool:
        """Whether the logged values are tensors (``False``: a torchmetrics ``Metric`` object was logged)."""
        return self.metric is None

    @property
    def value(self) -> torch.Tensor | None:
        """The epoch accumulation so far, as Lightning names it: the sum of value x batch size for ``"mean"``
        (divided by :attr:`cumulated_batch_size` when computed), the sum, max or min otherwise."""
        return self.epoch_acc

    @property
    def cumulated_batch_size(self) -> torch.Tensor | int:
        """The batch sizes a ``"mean"`` epoch value is weighted by, summed so far."""
        return self.count

    def update(self, value: torch.Tensor, batch_size: int | torch.Tensor, sync: _Sync | None = None) -> None:
        meta = self.meta
        self.updated = True
        self._computed = None
        if meta.on_step:
            # reduced when logged, where every process logs it: reading it later never communicates
            synced = meta.sync_dist and sync is not None
            self.step_value = sync(value, _step_op(meta.reduce_fx)) if synced else value  # type: ignore[misc]
        if not meta.on_epoch:
            return
        reduce = meta.reduce_fx
        acc = self.epoch_acc
        if reduce == "mean":
            if acc is not None and isinstance(batch_size, int):
                # one operation per step (a kernel launch on a GPU): the weighting rides along with the sum
                self.epoch_acc = torch.add(acc, value, alpha=batch_size)
            else:
                v = value.to(_acc_dtype(value)) * batch_size
                self.epoch_acc = v if acc is None else acc + v
            self.count = self.count + batch_size
        elif reduce == "sum":
            v = value.to(_acc_dtype(value))
            self.epoch_acc = v if acc is None else acc + v
        elif reduce == "max":
            self.epoch_acc = value.clone() if acc is None else torch.maximum(acc, value)
        else:
            self.epoch_acc = value.clone() if acc is None else torch.minimum(acc, value)

    def update_metric(self, metric: Any) -> None:
        """A torchmetrics.Metric: its forward result is the step value; ``compute()`` the epoch value."""
        self.metric = metric
        self.metric_released = False
        self.updated = True
        self._computed = None
        if self.meta.on_step:
            cache = getattr(metric, "_forward_cache", None)
            self.step_value = cache if isinstance(cache, torch.Tensor) else None

    def compute(self, sync: _Sync | None) -> torch.Tensor | None:
        """The epoch value. ``sync=None`` (a read between the reduction points) gives this process's value
        of a ``sync_dist`` key without keeping it: only a reduced value is kept."""
        if self._computed is not None:
            return self._computed
        if self.metric is not None:
            value = self.metric.compute()
        elif self.epoch_acc is None:
            return None
        elif self.meta.reduce_fx == "mean":
            acc, count = self.epoch_acc, self.count
            if self.meta.sync_dist and sync is not None:
                acc = sync(acc, "sum")
                count = sync(torch.as_tensor(count, device=acc.device, dtype=acc.dtype), "sum")
            value = acc / count
        else:
            value = self.epoch_acc
            if self.meta.sync_dist and sync is not None:
                value = sync(value, self.meta.reduce_fx)
        if sync is not None or not self.meta.sync_dist:
            self._computed = value
        return value


    # -- what a checkpoint keeps of an epoch in progress ---------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The running epoch aggregate as plain data (tensors on the CPU); a torchmetrics ``Metric``'s
        accumulated states too, found again on resume through ``meta.metric_attribute``."""
        meta = {k: v for k, v in asdict(self.meta).items() if k != "sync_dist_group"}  # a group is no data
        state: dict[str, Any] = {"meta": meta, "updated": self.updated, "epoch_acc": _cpu(self.epoch_acc),
                                 "count": _cpu(self.count), "metric": None}  # fmt: skip
        metric = self.metric
        if metric is not None and not self.metric_released and self.meta.metric_attribute is not None:
            states = getattr(metric, "metric_state", None)
            if isinstance(states, dict):
                state["metric"] = {"states": {k: _cpu(v) for k, v in states.items()},
                                   "updates": int(getattr(metric, "update_count", 0))}  # fmt: skip
        return state

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], device: torch.device, module: Any) -> ResultMetric:
        result = cls(LogMeta(**state["meta"], sync_dist_group=None))
        result.updated = bool(state["updated"])
        acc, count = state["epoch_acc"], state["count"]
        result.epoch_acc, result.count = move_data_to_device(acc, device), move_data_to_device(count, device)
        saved = state.get("metric")
        metric = _find_attribute(module, result.meta.metric_attribute) if saved is not None else None
        if saved is not None and metric is not None:
            for name, value in saved["states"].items():
                setattr(metric, name, move_data_to_device(value, device))
            metric._update_count = saved["updates"]  # torchmetrics' own counter: compute() reads it
            metric._computed = None
            result.metric = metric
        return result


def _cpu(value: Any) -> Any:
    """A copy of ``value``'s tensors on the CPU (a checkpoint must not share the running aggregates' storage)."""
    return apply_to_collection(value, torch.Tensor, lambda t: t.detach().to("cpu", copy=True))


def _find_attribute(module: Any, path: str | None) -> Any:
    found = module
    for part in (path or "").split("."):
        found = getattr(found, part, None) if part else None
    return found


_Sync = Callable[[torch.Tensor, str], torch.Tensor]


def _step_op(reduce_fx: Any) -> str:
    return reduce_fx if reduce_fx in ("sum", "max", "min") else "mean"


def _acc_dtype(value: torch.Tensor) -> torch.dtype:
    return value.dtype if value.is_floating_point() and value.dtype == torch.float64 else torch.float32

"""What ``self.log`` stores: one ``ResultCollection`` per stage run, a ``ResultMetric`` per logged key.

Values stay tensors on the device they were logged on. Step values are kept as-is (detached); epoch values
are accumulated with tensor ops (weighted sum + count for means). Nothing here converts a tensor to a Python
number: that happens only when a logger writes (every ``log_every_n_steps``) or the progress bar redraws.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from fulmen.utilities.apply_func import apply_to_collection, move_data_to_device
from fulmen.utilities.data import extract_batch_size
from fulmen.utilities.exceptions import InvalidValueError, MisconfigurationException
from fulmen.utilities.rank_zero import WarningCache

_REDUCE_NAMES = {"mean": "mean", "avg": "mean", "sum": "sum", "max": "max", "min": "min"}
# the builtins too: ``reduce_fx=max`` is how Lightning's docs and users often write it
_TORCH_REDUCE = {torch.mean: "mean", torch.sum: "sum", torch.max: "max", torch.min: "min", sum: "sum", max: "max",
                 min: "min"}  # fmt: skip

# (allowed on_step values, allowed on_epoch values, default on_step, default on_epoch) per hook; hooks not
# listed cannot log. Training-batch hooks default to per-step values, everything else to epoch values.
_STEP = ((False, True), (False, True), True, False)
_EVAL_BATCH = ((False, True), (False, True), False, True)
_EPOCH_ONLY = ((False,), (True,), False, True)
_LOG_OPTIONS: dict[str, tuple[tuple[bool, ...], tuple[bool, ...], bool, bool]] = {
    **dict.fromkeys(
        (
            "training_step",
            "on_train_batch_start",
            "on_train_batch_end",
            "on_before_backward",
            "backward",
            "on_after_backward",
            "on_before_optimizer_step",
            "optimizer_step",
            "configure_gradient_clipping",
            "clip_gradients",
            "on_before_zero_grad",
            "optimizer_zero_grad",
        ),
        _STEP,
    ),
    **dict.fromkeys(
        (
            "validation_step",
            "test_step",
            "on_validation_batch_start",
            "on_validation_batch_end",
            "on_test_batch_start",
            "on_test_batch_end",
        ),
        _EVAL_BATCH,
    ),
    **dict.fromkeys(
        (
            "on_train_start",
            "on_train_epoch_start",
            "on_train_epoch_end",
            "training_epoch_end",
            "on_validation_start",
            "on_validation_epoch_start",
            "on_validation_epoch_end",
            "validation_epoch_end",
            "on_test_start",
            "on_test_epoch_start",
            "on_test_epoch_end",
            "test_epoch_end",
        ),
        _EPOCH_ONLY,
    ),
}


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


def _is_metric(value: Any) -> bool:
    """torchmetrics.Metric without importing torchmetrics (duck-typed)."""
    return (
        callable(getattr(value, "compute", None))
        and callable(getattr(value, "update", None))
        and hasattr(value, "reset")
    )


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


_WARNINGS = WarningCache()  # each message once per process, however many runs log the value


def _acc_dtype(value: torch.Tensor) -> torch.dtype:
    return value.dtype if value.is_floating_point() and value.dtype == torch.float64 else torch.float32


class ResultCollection:
    """All keys logged during one stage run (a training epoch, or one evaluation run)."""

    def __init__(self, training: bool) -> None:
        self.training = training
        self.items: dict[str, ResultMetric] = {}
        self._meta_cache: dict[tuple[Any, ...], tuple[LogMeta, str]] = {}  # -> (meta, key in items)
        self.batch: Any = None
        self._batch_size: int | None = None
        self.dataloader_idx: int | None = None
        self.sync: Callable[[torch.Tensor, str], torch.Tensor] | None = None

    @property
    def result_metrics(self) -> list[ResultMetric]:
        """Every logged key's record (callbacks look a monitored key up here to see how it is reduced)."""
        return list(self.items.values())

    def __getitem__(self, key: str) -> ResultMetric:
        """A logged key's record by Lightning's name for it: ``"<hook>.<name>"``, ``".<dataloader_idx>"`` added
        for a value logged under several evaluation loaders (``trainer._results["validation_step.loss.0"]``)."""
        for result in self.items.values():
            meta = result.meta
            if f"{meta.fx}.{meta.name}" + ("" if meta.dataloader_idx is None else f".{meta.dataloader_idx}") == key:
                return result
        raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        try:
            self[str(key)]
        except KeyError:
            return False
        return True

    # -- per-batch context, set by the loops --------------------------------------------------------
    def set_batch(self, batch: Any, dataloader_idx: int | None = None) -> None:
        self.batch = batch
        self._batch_size = None
        self.dataloader_idx = dataloader_idx

    def clear_batch(self) -> None:
        """The batch has ended: values logged until the next one (epoch-end hooks) count with batch size 1, as
        in Lightning, which drops its batch there too."""
        self.batch = None
        self._batch_size = None

    def _current_batch_size(self) -> int:
        if self._batch_size is None:
            self._batch_size = extract_batch_size(self.batch) if self.batch is not None else 1
        return self._batch_size

    # -- self.log -----------------------------------------------------------------------------------
    def log(
        self,
        fx: str,
        name: str,
        value: Any,
        device: torch.device,
        prog_bar: bool = False,
        logger: bool = True,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Callable[..., Any] = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        metric_attribute: str | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        cache_key = (
            fx, name, prog_bar, logger, on_step, on_epoch, reduce_fx, enable_graph, sync_dist,
            add_dataloader_idx, self.dataloader_idx, rank_zero_only,
        )  # fmt: skip
        cached = self._meta_cache.get(cache_key)
        if cached is None:
            meta = self._make_meta(
                fx, name, prog_bar, logger, on_step, on_epoch, reduce_fx, enable_graph, sync_dist,
                sync_dist_group, add_dataloader_idx, rank_zero_only, metric_attribute,
            )  # fmt: skip
            cached = self._meta_cache[cache_key] = (meta, f"{fx}.{meta.display_name}")
        meta, key = cached
        result = self.items.get(key)
        if result is None:
            # the same name from another hook is another entry (the key names the hook): where both have a
            # value, the one logged first in the run is read first and the other overrides it, so e.g.
            # on_train_epoch_end's value replaces training_step's at the epoch end (programs rely on it)
            result = self.items[key] = ResultMetric(meta)
        elif result.meta != meta:
            raise MisconfigurationException(
                f"You called `self.log({name}, ...)` twice in `{fx}` with different arguments. Log each name with "
                "one set of arguments per hook."
            )
        if type(value) is not torch.Tensor and _is_metric(value):
            result.update_metric(value)
            return
        value = self._to_tensor(fx, name, value, device, enable_graph)
        bs: int | torch.Tensor = 1
        if meta.on_epoch and meta.reduce_fx == "mean" and result.metric is None:
            bs = batch_size if batch_size is not None else self._current_batch_size()
        result.update(value, bs, self.sync)

    def _make_meta(
        self, fx: str, name: str, prog_bar: bool, logger: bool, on_step: bool | None, on_epoch: bool | None,
        reduce_fx: Any, enable_graph: bool, sync_dist: bool, sync_dist_group: Any, add_dataloader_idx: bool,
        rank_zero_only: bool, metric_attribute: str | None,
    ) -> LogMeta:  # fmt: skip
        options = _LOG_OPTIONS.get(fx)
        if options is None:
            raise MisconfigurationException(
                f"self.log({name!r}) was called inside `{fx}`, where logging is not supported. Log from a "
                "step or an epoch/batch hook instead (e.g. training_step, on_train_epoch_end)."
            )
        allowed_step, allowed_epoch, default_step, default_epoch = options
        on_step = default_step if on_step is None else on_step
        on_epoch = default_epoch if on_epoch is None else on_epoch
        if on_step not in allowed_step:
            raise MisconfigurationException(
                f"self.log({name!r}, on_step={on_step!r}) is not allowed in `{fx}`: it runs once per epoch. "
                "Use on_step=False."
            )
        if on_epoch not in allowed_epoch:
            raise MisconfigurationException(
                f"self.log({name!r}, on_epoch={on_epoch!r}) is not allowed in `{fx}`. Use on_epoch=True."
            )
        if not on_step and not on_epoch:
            raise MisconfigurationException(
                f"self.log({name!r}, on_step=False, on_epoch=False) is not useful: it would never record the value. "
                "Set at least one of on_step / on_epoch to True."
            )
        return LogMeta(
            fx=fx, name=name, prog_bar=prog_bar, logger=logger, on_step=on_step, on_epoch=on_epoch,
            reduce_fx=_parse_reduce_fx(reduce_fx), enable_graph=enable_graph, sync_dist=sync_dist,
            sync_dist_group=sync_dist_group, dataloader_idx=self.dataloader_idx,
            add_dataloader_idx=add_dataloader_idx, rank_zero_only=rank_zero_only,
            metric_attribute=metric_attribute,
        )  # fmt: skip

    def _to_tensor(self, fx: str, name: str, value: Any, device: torch.device, enable_graph: bool) -> torch.Tensor:
        """A zero-dimensional tensor in a float dtype that reduces exactly enough: float64 stays, other floats
        (float16, bfloat16) and integers or booleans become the default dtype, so step, epoch and reduced values
        read the same whatever the model computed in (an integer tensor also gets a warning, once per name)."""
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise InvalidValueError(  # a ValueError, as Lightning raises, and a MisconfigurationException
                    f"self.log({name!r}, value) got a tensor of shape {tuple(value.shape)}: the logged tensor must "
                    f"have a single element. Reduce it first, e.g. self.log({name!r}, value.mean())."
                )
            if value.ndim:
                value = value.reshape(())
            dtype = value.dtype
            if dtype is not torch.float32 and dtype is not torch.float64:  # a dtype read: no device sync
                if not value.is_floating_point():
                    _WARNINGS.warn(
                        f"self.log({name!r}, ...) in `{fx}` got a {dtype} tensor, which needs to be floating to be "
                        f"reduced: converting it to {torch.get_default_dtype()}. Convert it yourself to silence "
                        "this; a count that is not meant to be reduced (a step, an epoch) can go to the loggers "
                        f"directly: self.logger.log_metrics({{{name!r}: ...}})."
                    )
                value = value.to(torch.get_default_dtype())
            return value if enable_graph else value.detach()
        if not isinstance(value, (int, float)):  # bool is an int: True logs as 1.0
            if hasattr(value, "item") and callable(value.item):  # numpy scalars
                value = value.item()
            else:
                raise InvalidValueError(
                    f"`self.log({name}, {value})` was called, but `{type(value).__name__}` values cannot be logged: "
                    "log a number, a one-element tensor or a torchmetrics Metric. For several values use "
                    "self.log_dict()."
                )
        return torch.tensor(value, device=device, dtype=torch.get_default_dtype())

    # -- reading ------------------------------------------------------------------------------------
    def metrics(
        self, epoch: bool, reading: bool = False
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        """(callback, logger, progress bar) metrics: step values, or epoch values when ``epoch``.

        ``reading``: a read that may happen on some processes only (a callback's, the progress bar's on rank
        0): it must not start a collective, which the other processes would never join.
        """
        callback: dict[str, Any] = {}
        log: dict[str, Any] = {}
        pbar: dict[str, Any] = {}
        sync = None if reading else self.sync
        for result in self.items.values():
            meta = result.meta
            if epoch:
                if not meta.on_epoch or not result.updated:
                    continue
                value = result.compute(sync)
                forked = meta.epoch_name
            else:
                if not meta.on_step or result.step_value is None:
                    continue
                value = result.step_value
                forked = meta.step_name
            if value is None:
                continue
            callback[meta.display_name] = value  # the name, then its forked one: Lightning's order of the keys
            callback[forked] = value
            if meta.logger:
                log[forked] = value
            if meta.prog_bar:
                pbar[forked] = value
        return callback, log, pbar

    def reduce_epoch(self) -> None:
        """Reduce every epoch value now, on every process: called where all processes are (an epoch's end,
        before its hooks read the values)."""
        for result in self.items.values():
            if result.meta.on_epoch and result.updated:
                result.compute(self.sync)

    def release_metrics(self) -> None:
        """Reset the state of every logged torchmetrics ``Metric`` (logged per step or per epoch) once the run's
        values were read: after an epoch or an evaluation run a user's metric object starts clean, as under
        Lightning, and code that counts its ``reset`` calls sees one per run. The values already read stay
        readable: epoch values are kept once computed and step values are tensors of their own."""
        for result in self.items.values():
            if result.metric is not None and not result.metric_released:
                if result.meta.on_epoch and result.updated:
                    result.compute(self.sync)  # kept for later reads of callback_metrics
                result.metric.reset()
                result.metric_released = True

    def state_dict(self) -> dict[str, Any]:
        """The epoch aggregates logged so far (``on_epoch`` keys), for a checkpoint written mid-epoch."""
        return {key: result.state_dict() for key, result in self.items.items() if result.meta.on_epoch}

    def load_state_dict(self, state: dict[str, Any], device: torch.device, module: Any) -> None:
        """Continue an epoch from :meth:`state_dict`: the aggregates replace what this run logged so far."""
        self.reset()
        for key, saved in state.items():
            self.items[key] = ResultMetric.from_state_dict(saved, device, module)

    def reset(self) -> None:
        for result in self.items.values():
            if result.metric is not None and result.meta.on_epoch and not result.metric_released:
                result.metric.reset()
        self.items.clear()
        self.batch = None
        self._batch_size = None
        self.dataloader_idx = None


def to_scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """Python numbers for loggers and the progress bar. This is a host-device sync point."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        out[k] = v.item() if isinstance(v, torch.Tensor) else v
    return out

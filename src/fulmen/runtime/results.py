"""What ``self.log`` stores: one ``ResultCollection`` per stage run, a ``ResultMetric`` per logged key.

Values stay tensors on the device they were logged on. Step values are kept as-is (detached); epoch values
are accumulated with tensor ops (weighted sum + count for means). Nothing here converts a tensor to a Python
number: that happens only when a logger writes (every ``log_every_n_steps``) or the progress bar redraws.
One key's record and its accumulation live in :mod:`fulmen.runtime.result_metric`; here: the collection, which
hooks may log with which defaults, and the checks of a logged value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

# one logged key's record and what it is built from, importable from here as before the split
from fulmen.runtime.result_metric import _REDUCE_NAMES as _REDUCE_NAMES
from fulmen.runtime.result_metric import _TORCH_REDUCE as _TORCH_REDUCE
from fulmen.runtime.result_metric import LogMeta as LogMeta
from fulmen.runtime.result_metric import ResultMetric as ResultMetric
from fulmen.runtime.result_metric import SyncSpec as SyncSpec
from fulmen.runtime.result_metric import _acc_dtype as _acc_dtype
from fulmen.runtime.result_metric import _cpu as _cpu
from fulmen.runtime.result_metric import _find_attribute as _find_attribute
from fulmen.runtime.result_metric import _parse_reduce_fx as _parse_reduce_fx
from fulmen.runtime.result_metric import _step_op as _step_op
from fulmen.runtime.result_metric import _Sync as _Sync
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.apply_func import move_data_to_device as move_data_to_device
from fulmen.utilities.data import extract_batch_size
from fulmen.utilities.exceptions import InvalidValueError, MisconfigurationException
from fulmen.utilities.rank_zero import WarningCache

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


def _is_metric(value: Any) -> bool:
    """torchmetrics.Metric without importing torchmetrics (duck-typed)."""
    return (
        callable(getattr(value, "compute", None))
        and callable(getattr(value, "update", None))
        and hasattr(value, "reset")
    )


_WARNINGS = WarningCache()  # each message once per process, however many runs log the value


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

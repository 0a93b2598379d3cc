"""``LightningModule.log`` and ``log_dict``: a value recorded for callbacks, loggers and the progress bar, through
the trainer's results (or the attached Lightning Fabric), with the checks of the name and of a logged
``torchmetrics.Metric``."""

from __future__ import annotations

import contextlib
import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor, nn

from fulmen.core.mixins import DeviceDtypeModuleMixin
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer


class MetricLoggingMixin(DeviceDtypeModuleMixin):
    """``LightningModule``'s ``log`` / ``log_dict`` (a base of it: they are found as ``LightningModule.log``).

    Derives from the module class it reads (its device, its submodules); that stays after it in
    ``LightningModule``'s MRO, where it was.
    """

    if TYPE_CHECKING:  # set in LightningModule.__init__; annotated here for type checkers only (see there)
        _trainer: Trainer | None
        _fabric: Any
        _current_fx_name: str | None

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

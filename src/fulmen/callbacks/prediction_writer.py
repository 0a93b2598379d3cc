"""``BasePredictionWriter``: write predictions as they are made, or all at once at the end."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import torch

from fulmen.checkpoint import files as checkpoint_io
from fulmen.core.hooks import Callback
from fulmen.utilities import cloud_io
from fulmen.utilities.apply_func import apply_to_collection
from fulmen.utilities.enums import LightningEnum
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer import Trainer

class WriteInterval(LightningEnum):
    """When a prediction writer writes: after each batch, at the end of the run's epoch, or both."""

    BATCH = "batch"
    EPOCH = "epoch"
    BATCH_AND_EPOCH = "batch_and_epoch"

    @property
    def on_batch(self) -> bool:
        return self in (self.BATCH, self.BATCH_AND_EPOCH)

    @property
    def on_epoch(self) -> bool:
        return self in (self.EPOCH, self.BATCH_AND_EPOCH)


_INTERVALS = tuple(member.value for member in WriteInterval)


class BasePredictionWriter(Callback):
    """Subclass and implement ``write_on_batch_end`` and/or ``write_on_epoch_end``.

    ``batch_indices`` are the dataset indices of the samples in a batch, read from the dataloader's batch
    sampler (under several processes each rank sees its own share, so rank r can write ``predictions_r``
    and the files together cover the dataset). A loader without a batch sampler (an iterable dataset) gives
    empty lists. With ``write_interval="epoch"`` the loop keeps every prediction until the epoch ends, even
    with ``trainer.predict(..., return_predictions=False)``; with ``"batch"`` it keeps none of them.
    """

    def __init__(self, write_interval: Literal["batch", "epoch", "batch_and_epoch"] = "batch") -> None:
        if write_interval not in _INTERVALS:
            raise MisconfigurationException(
                f"BasePredictionWriter(write_interval={write_interval!r}): choose one of {', '.join(_INTERVALS)}."
            )
        self.interval = WriteInterval(write_interval)

    @property
    def on_batch(self) -> bool:
        return self.interval in ("batch", "batch_and_epoch")

    @property
    def on_epoch(self) -> bool:
        return self.interval in ("epoch", "batch_and_epoch")

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage == "predict":
            trainer.predict_loop.request_outputs(predictions=self.on_epoch, batch_indices=True)

    def write_on_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, prediction: Any, batch_indices: Sequence[int] | None,
        batch: Any, batch_idx: int, dataloader_idx: int,
    ) -> None:  # fmt: skip
        """Write one batch's prediction (``write_interval`` "batch" or "batch_and_epoch")."""
        raise NotImplementedError(f"{type(self).__name__} writes per batch but does not implement write_on_batch_end.")

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        """Write every prediction of the run (``write_interval`` "epoch" or "batch_and_epoch")."""
        raise NotImplementedError(f"{type(self).__name__} writes per epoch but does not implement write_on_epoch_end.")

    def on_predict_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        if self.on_batch:
            indices = trainer.predict_loop.current_batch_indices
            self.write_on_batch_end(trainer, pl_module, outputs, indices, batch, batch_idx, dataloader_idx)

    def on_predict_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.on_epoch:
            return
        # predictions as predict() returns them (one list for one dataloader); the indices always per
        # dataloader, as Lightning passes them
        loop = trainer.predict_loop
        self.write_on_epoch_end(trainer, pl_module, loop.predictions, loop.epoch_batch_indices)


class PredictionFileWriter(BasePredictionWriter):
    """A ready-made writer (fulmen's; Lightning has only the base class): ``torch.save`` files under
    ``output_dir`` (a local path or any fsspec URL), each holding the predictions with the dataset indices
    they belong to.

    - ``"epoch"``: ``predictions.pt`` = ``{"predictions": [...], "batch_indices": [...]}`` (lists per
      dataloader when there are several).
    - ``"batch"``: ``batch_<dataloader>_<batch>.pt`` = ``{"prediction": ..., "batch_indices": [...]}``.

    Under several processes every file name gets ``-rank<r>``: each rank writes its own share.
    ``fulmen predict --trainer.callbacks=fulmen.callbacks.PredictionFileWriter
    --trainer.callbacks.output_dir=preds`` writes there and says so."""

    def __init__(
        self, output_dir: str | os.PathLike[str], write_interval: Literal["batch", "epoch", "batch_and_epoch"] = "epoch"
    ) -> None:
        super().__init__(write_interval)
        cloud_io.check_reachable(output_dir, "PredictionFileWriter(output_dir)")
        self.output_dir = cloud_io.local(output_dir)
        self.written: list[str] = []

    def _path(self, trainer: Trainer, name: str) -> str:
        suffix = f"-rank{trainer.global_rank}" if trainer.world_size > 1 else ""
        return cloud_io.join(self.output_dir, f"{name}{suffix}.pt")

    def _save(self, obj: Any, path: str) -> None:
        checkpoint_io.atomic_write(path, lambda f: torch.save(obj, f))
        self.written.append(path)

    def write_on_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, prediction: Any, batch_indices: Sequence[int] | None,
        batch: Any, batch_idx: int, dataloader_idx: int,
    ) -> None:  # fmt: skip
        path = self._path(trainer, f"batch_{dataloader_idx}_{batch_idx}")
        self._save({"prediction": _to_cpu(prediction), "batch_indices": list(batch_indices or [])}, path)

    def write_on_epoch_end(
        self, trainer: Trainer, pl_module: LightningModule, predictions: Sequence[Any], batch_indices: Sequence[Any]
    ) -> None:
        indices: Any = batch_indices[0] if len(batch_indices) == 1 else batch_indices  # as the predictions
        self._save({"predictions": _to_cpu(predictions), "batch_indices": indices}, self._path(trainer, "predictions"))

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self.written = []


def _to_cpu(value: Any) -> Any:
    return apply_to_collection(value, torch.Tensor, lambda t: t.detach().cpu())


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "is_param_in_hook_signature": "fulmen.utilities.signature_utils.is_param_in_hook_signature",
})  # fmt: skip

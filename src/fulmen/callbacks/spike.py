"""``SpikeDetection``: stop training at a loss spike and record the batches to skip when rerunning."""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import torch

from fulmen.core.hooks import Callback
from fulmen.utilities import cloud_io

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer import Trainer


class TrainingSpikeException(RuntimeError):
    """The training loss spiked at a batch."""

    def __init__(self, batch_idx: int, *args: Any) -> None:
        super().__init__(f"Training spike detected in batch {batch_idx}", *args)


class SpikeDetection(Callback):
    """Raise ``TrainingSpikeException`` when the training loss jumps away from its recent mean.

    A loss is a spike, once ``warmup`` batches have passed, when it is worse than the mean of the last
    ``window`` accepted losses (higher for ``mode="min"``, lower for ``"max"``) by at least ``atol`` and by
    at least ``rtol`` times that mean (each bound only when set), or, with ``finite_only``, not finite.
    Spikes never enter the mean. Before raising, the batch and the one before it (whose update may have
    caused the spike) are appended to ``exclude_batches_path`` (JSON list; default
    ``<default_root_dir>/skip_batches.json``), so a rerun can skip them. Under several processes a spike on
    any rank stops every rank.

    Checking needs the loss value on the host: one sync per training batch, the price of this callback.
    """

    def __init__(
        self,
        mode: Literal["min", "max"] = "min",
        window: int = 10,
        warmup: int = 1,
        atol: float | None = None,
        rtol: float | None = 2.0,
        exclude_batches_path: str | None = None,
        finite_only: bool = True,
    ) -> None:
        super().__init__()  # cooperative (a mixin's __init__ after this class runs), as Lightning's
        if mode not in ("min", "max"):
            raise ValueError(f"SpikeDetection(mode={mode!r}) must be 'min' (lower loss is better) or 'max'.")
        if not isinstance(window, int) or window < 1:
            raise ValueError(f"SpikeDetection(window={window!r}) must be an int >= 1.")
        if not isinstance(warmup, int) or warmup < 0:
            raise ValueError(f"SpikeDetection(warmup={warmup!r}) must be an int >= 0.")
        self.mode = mode
        self.window = window
        self.warmup = warmup
        self.atol = atol
        self.rtol = rtol
        self.exclude_batches_path = exclude_batches_path
        self.finite_only = finite_only
        self.bad_batches: list[int] = []
        self._recent: deque[float] = deque(maxlen=window)
        self._seen = 0

    @torch.no_grad()
    def on_train_batch_end(
        self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if isinstance(outputs, torch.Tensor):
            loss = outputs
        elif isinstance(outputs, Mapping) and isinstance(outputs.get("loss"), torch.Tensor):
            loss = outputs["loss"]
        elif outputs is None or (isinstance(outputs, Mapping) and not outputs):
            return  # training_step returned None: the batch was skipped on purpose, there is no loss to judge
        else:
            what = f"a {type(outputs).__qualname__} with keys {list(outputs)}" if isinstance(outputs, Mapping) else type(outputs).__qualname__
            raise TypeError(
                f"SpikeDetection reads the loss from training_step's output, which must be a tensor or a "
                f"mapping with a 'loss' tensor; got {what}."
            )
        if self.exclude_batches_path is None:
            self.exclude_batches_path = cloud_io.join(trainer.default_root_dir, "skip_batches.json")
        value = float(loss.detach().float().mean())
        spike = self._seen >= self.warmup and self._is_spike(value)
        self._seen += 1
        spike = trainer.strategy.reduce_boolean_decision(spike, all=False)
        if not spike:
            self._recent.append(value)
            return
        self.bad_batches.extend(i for i in (batch_idx - 1, batch_idx) if i >= 0)
        if trainer.is_global_zero:
            cloud_io.write_text(self.exclude_batches_path, json.dumps(self.bad_batches, indent=4))
        trainer.strategy.barrier("spike_detection")
        raise TrainingSpikeException(batch_idx)

    def _is_spike(self, value: float) -> bool:
        if not math.isfinite(value):
            if self.finite_only:
                return True
            if math.isnan(value):
                return False
        if not self._recent:
            return False
        mean = sum(self._recent) / len(self._recent)
        worse_by = value - mean if self.mode == "min" else mean - value
        if worse_by <= 0:
            return False
        if self.atol is not None and worse_by < self.atol:
            return False
        return self.rtol is None or worse_by >= self.rtol * abs(mean)

FabricSpikeDetection = SpikeDetection  # Lightning Fabric's SpikeDetection, the base of Lightning's: fulmen's is the one class

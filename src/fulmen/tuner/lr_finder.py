"""The learning-rate range test: train a few steps while the learning rate grows from ``min_lr`` to ``max_lr``
and suggest the rate where the loss falls fastest.

The trial runs in a trial trainer (see :mod:`fulmen.tuner.trials`) with the first optimizer the module
configures; its learning-rate schedulers are left out. The module's weights are put back afterwards.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from fulmen.core.hooks import Callback
from fulmen.tuner.trials import field_owners, preserved, run_stage, set_field, trial_trainer
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _MATPLOTLIB_AVAILABLE as _MATPLOTLIB_AVAILABLE
from fulmen.utilities.imports import RequirementCache as RequirementCache
from fulmen.utilities.parsing import lightning_hasattr as lightning_hasattr
from fulmen.utilities.parsing import lightning_setattr as lightning_setattr
from fulmen.utilities.rank_zero import rank_zero_error, rank_zero_info, rank_zero_warn
from fulmen.utilities.types import LRSchedulerConfig as LRSchedulerConfig

if TYPE_CHECKING:
    from fulmen.core.datamodule import LightningDataModule
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

_MODES = ("exponential", "linear")
_LR_NAMES = ("lr", "learning_rate")
_SMOOTHING = 0.98  # the loss is an exponential moving average (bias-corrected) over the steps


class LRFinder:
    """The range test's record: ``results = {"lr": [...], "loss": [...]}`` (smoothed loss per step)."""

    def __init__(self, mode: str, lr_min: float, lr_max: float, num_training: int) -> None:
        self.mode = mode
        self.lr_min = lr_min
        self.lr_max = lr_max
        self.num_training = num_training
        self.results: dict[str, list[float]] = {"lr": [], "loss": []}
        self._optimal_idx: int | None = None

    def lr_at(self, step: int) -> float:
        """The learning rate of step ``step`` (0-based) of the test."""
        fraction = step / max(1, self.num_training - 1)
        if self.mode == "linear":
            return self.lr_min + fraction * (self.lr_max - self.lr_min)
        return self.lr_min * (self.lr_max / self.lr_min) ** fraction

    def suggestion(self, skip_begin: int = 10, skip_end: int = 1) -> float | None:
        """The learning rate where the smoothed loss decreases fastest (its most negative slope), ignoring the
        first ``skip_begin`` and last ``skip_end`` steps; ``None`` when too few steps remain."""
        losses = self.results["loss"][skip_begin : len(self.results["loss"]) - skip_end]
        lrs = self.results["lr"][skip_begin : len(self.results["lr"]) - skip_end]
        finite = [i for i, v in enumerate(losses) if math.isfinite(v)]
        if len(finite) < 2:
            rank_zero_error(
                f"Failed to compute suggestion for learning rate because there are not enough points: "
                f"{len(self.results['loss'])} steps recorded, {len(finite)} finite after skipping {skip_begin} + "
                f"{skip_end}. Raise num_training (or the size of your dataloader), or lower skip_begin/skip_end."
            )
            self._optimal_idx = None
            return None
        values = torch.tensor([losses[i] for i in finite], dtype=torch.float64)
        slope = torch.gradient(values)[0]
        best = finite[int(torch.argmin(slope))]
        self._optimal_idx = best + skip_begin
        return lrs[best]

    def plot(self, suggest: bool = False, show: bool = False, ax: Any = None) -> Any:
        """Loss against learning rate (log scale for 'exponential'); ``suggest`` marks the suggestion.
        Returns the matplotlib figure (matplotlib is imported here, only when plotting)."""
        if ax is not None:
            figure = ax.figure
        elif show:
            import matplotlib.pyplot as plt

            figure, ax = plt.subplots()
        else:  # a figure of its own, without pyplot: the user's backend is left alone
            from matplotlib.figure import Figure

            figure = Figure()
            ax = figure.subplots()
        lrs, losses = self.results["lr"], self.results["loss"]
        ax.plot(lrs, losses)
        if self.mode == "exponential":
            ax.set_xscale("log")
        ax.set_xlabel("learning rate")
        ax.set_ylabel("loss (smoothed)")
        if suggest:
            lr = self.suggestion()
            if lr is not None and self._optimal_idx is not None:
                ax.plot(lr, losses[self._optimal_idx], marker="o", markersize=10, color="red")
                ax.set_title(f"suggested learning rate: {lr:.3g}")
        if show:
            import matplotlib.pyplot as plt

            plt.show()
        return figure


class _RangeTest(Callback):
    """Inside the trial: sets the first optimizer's learning rate for every step and records the loss."""

    def __init__(self, finder: LRFinder, early_stop_threshold: float | None) -> None:
        self.finder = finder
        self.threshold = early_stop_threshold
        self._average = 0.0
        self._best = math.inf
        self._stepped = 0

    def _set_lr(self, trainer: Trainer, lr: float) -> None:
        for group in trainer.optimizers[0].param_groups:
            group["lr"] = lr

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if len(trainer.optimizers) != 1:
            raise MisconfigurationException(
                f"The learning-rate finder only works with single optimizer; configure_optimizers returned "
                f"{len(trainer.optimizers)}."
            )
        trainer.strategy.lr_scheduler_configs = []  # the test sets the learning rate itself
        self._set_lr(trainer, self.finder.lr_at(0))

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:  # fmt: skip
        if trainer.global_step == self._stepped:
            return  # a batch that only accumulated
        self._stepped = trainer.global_step
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        step = len(self.finder.results["loss"])
        if loss is None:  # training_step skipped the batch (returned None): no loss for this learning rate
            self.finder.results["lr"].append(self.finder.lr_at(step))
            self.finder.results["loss"].append(float("nan"))
            return
        if not isinstance(loss, torch.Tensor):
            raise MisconfigurationException(
                "The learning-rate finder reads the loss training_step returns, but it returned "
                f"{type(outputs).__name__}. Return the loss (automatic optimization)."
            )
        self._average = _SMOOTHING * self._average + (1 - _SMOOTHING) * float(loss)
        smoothed = self._average / (1 - _SMOOTHING ** (step + 1))
        self.finder.results["lr"].append(self.finder.lr_at(step))
        self.finder.results["loss"].append(smoothed)
        self._best = min(self._best, smoothed)
        diverged = not math.isfinite(smoothed) or (
            self.threshold is not None and step > 0 and smoothed > self.threshold * self._best
        )
        if diverged:
            trainer.should_stop = True
            rank_zero_info(
                f"The learning-rate finder stopped at lr={self.finder.lr_at(step):.3g}: the loss diverged."
            )
        else:
            self._set_lr(trainer, self.finder.lr_at(step + 1))


def lr_attribute(model: LightningModule, attr_name: str) -> tuple[Any, str] | None:
    """Where the learning rate lives: ``attr_name``, else 'lr' or 'learning_rate', on the module or in its
    hparams."""
    names = (attr_name,) if attr_name else _LR_NAMES
    for name in names:
        if name in model.hparams:
            return model.hparams, name
        if hasattr(model, name):
            return model, name
    return None


def lr_find(
    trainer: Trainer,
    model: LightningModule,
    train_dataloaders: Any = None,
    val_dataloaders: Any = None,
    dataloaders: Any = None,
    datamodule: LightningDataModule | None = None,
    method: str = "fit",
    min_lr: float = 1e-8,
    max_lr: float = 1.0,
    num_training: int = 100,
    mode: str = "exponential",
    early_stop_threshold: float | None = 4.0,
    update_attr: bool = True,
    attr_name: str = "",
) -> LRFinder | None:
    if method != "fit" or dataloaders is not None:
        raise MisconfigurationException(
            f"method={method!r}, dataloaders={type(dataloaders).__name__}: the learning-rate finder trains, so only "
            "method='fit' works, with train_dataloaders= (and val_dataloaders=) rather than dataloaders=."
        )
    if mode not in _MODES:
        raise MisconfigurationException(f"mode={mode!r} is not a learning-rate finder mode: use {_MODES}.")
    if not (min_lr > 0 and max_lr > 0) or min_lr == max_lr:
        raise MisconfigurationException(f"min_lr={min_lr!r} and max_lr={max_lr!r} must be two different rates > 0.")
    if min_lr > max_lr:  # Lightning sweeps downward then; say so, since it is more likely a mix-up
        rank_zero_warn(f"lr_find(min_lr={min_lr}, max_lr={max_lr}): min_lr is the larger; the sweep goes downward.")
    if isinstance(num_training, bool) or not isinstance(num_training, int) or num_training < 1:
        raise MisconfigurationException(f"num_training={num_training!r} must be an int >= 1.")
    if early_stop_threshold is not None and early_stop_threshold <= 1:
        raise MisconfigurationException(
            f"early_stop_threshold={early_stop_threshold!r} must be > 1 (stop when the loss exceeds that many "
            "times its best), or None to never stop early."
        )
    where = lr_attribute(model, attr_name)
    if update_attr and where is None:
        wanted = f"`{attr_name}`" if attr_name else "`lr` or `learning_rate`"
        raise AttributeError(  # Lightning's class
            f"The learning-rate finder writes its suggestion to {wanted}: the model or its hparams should have one "
            "of these fields. Add it (and read it in configure_optimizers), pass attr_name=..., or update_attr=False."
        )
    finder = LRFinder(mode, min_lr, max_lr, num_training)
    loaders = {"train_dataloaders": train_dataloaders, "val_dataloaders": val_dataloaders}
    outer = trainer.strategy
    outer.prepare_for_tuning()  # the process group rank 0's record is shared through
    with preserved(model, datamodule):
        trial = trial_trainer(trainer, num_training, limit_val_batches=0,
                              callbacks=[_RangeTest(finder, early_stop_threshold)])  # fmt: skip
        run_stage(trial, "fit", model, datamodule, {k: v for k, v in loaders.items() if v is not None})
    # under DDP every process ran its own test; all take rank 0's, so they all train with the same rate
    finder.results = outer.broadcast(finder.results, src=0)
    lr = finder.suggestion()
    if update_attr and lr is not None and where is not None:
        name = where[1]
        for owner, field in field_owners(model, datamodule, name):  # self.lr and hparams.lr alike
            set_field(owner, field, lr)
        rank_zero_info(f"Learning rate set to {lr:.3g} ({name}).")
    return finder


_LRFinder = LRFinder  # Lightning's name for the result

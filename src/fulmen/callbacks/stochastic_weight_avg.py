"""Stochastic weight averaging, following ``torch.optim.swa_utils``' recipe (``AveragedModel``, ``SWALR``,
BatchNorm statistics recomputed at the end)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import SWALR, AveragedModel

from fulmen.callbacks.callback import Callback
from fulmen.core.optimizers import LRSchedulerConfig
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

_ANNEALING = ("cos", "linear")


class StochasticWeightAveraging(Callback):
    """Averages the weights of the last epochs and trains with them.

    - ``swa_epoch_start``: an int is a 1-based epoch number (2: the second epoch); a float in (0, 1) a fraction
      of ``max_epochs`` (0.8 of 10 epochs: from epoch index 8, the ninth).
    - From that epoch on the learning rate follows ``SWALR`` to ``swa_lrs`` (a float, or a list with one per
      parameter group) over ``annealing_epochs``, stepped once per epoch; the module's own schedulers stop.
      ``swa_lrs`` must be given; ``None`` (what 1.x's ``Trainer(stochastic_weight_avg=True)`` uses) keeps each
      group's current rate.
    - The weights at the end of every epoch from the start epoch through the last are averaged (``avg_fn``,
      default the running mean) into a copy kept on ``device``. If training stops early once averaging began
      (max_steps, EarlyStopping, max_time), the weights at that point join the average.
    - When training ends, the average replaces the module's weights and BatchNorm statistics are recomputed
      for it with one pass over the training data (``training_step`` in train mode, no optimizer step).
    - The average, its count and the scheduler are checkpointed: a resumed run ends as an uninterrupted one.
    """

    def __init__(
        self,
        swa_lrs: float | list[float] | None,
        swa_epoch_start: int | float = 0.8,
        annealing_epochs: int = 10,
        annealing_strategy: Literal["cos", "linear"] = "cos",
        avg_fn: Callable[[Tensor, Tensor, Tensor], Tensor] | None = None,
        device: torch.device | str | None = torch.device("cpu"),
    ) -> None:
        if isinstance(swa_epoch_start, bool) or not (
            (isinstance(swa_epoch_start, int) and swa_epoch_start >= 1)
            or (isinstance(swa_epoch_start, float) and 0 < swa_epoch_start < 1)
        ):
            raise MisconfigurationException(
                f"swa_epoch_start={swa_epoch_start!r} should be a >0 integer or a float between 0 and 1: an int >= 1 (a "
                "1-based epoch number) or a float in (0, 1) (a fraction of max_epochs)."
            )
        lrs = swa_lrs if isinstance(swa_lrs, (list, tuple)) else [swa_lrs] if swa_lrs is not None else []
        if any(not isinstance(lr, float) or lr <= 0 for lr in lrs):  # an int is refused as by Lightning: 1 -> 1.0
            raise MisconfigurationException(
                f"swa_lrs={swa_lrs!r} should be a positive float, or a list of positive floats (one per parameter "
                "group), or None to keep each group's current learning rate."
            )
        if (
            isinstance(annealing_epochs, bool)
            or not isinstance(annealing_epochs, int)
            or annealing_epochs < 1
        ):
            raise MisconfigurationException(f"annealing_epochs={annealing_epochs!r} must be an int >= 1.")
        if annealing_strategy not in _ANNEALING:
            raise MisconfigurationException(
                f"annealing_strategy={annealing_strategy!r} must be 'cos' or 'linear'."
            )
        self.swa_lrs = swa_lrs
        self.swa_epoch_start = swa_epoch_start
        self.annealing_epochs = annealing_epochs
        self.annealing_strategy = annealing_strategy
        self.avg_fn = avg_fn
        self.device = torch.device(device) if device is not None else None
        self._average: AveragedModel | None = None
        self._scheduler: SWALR | None = None
        self._user_schedulers: list[LRSchedulerConfig] = []
        self._averaged_at_step: int | None = None  # global step of the last weights added to the average
        self._restored: dict[str, Any] | None = None

    # -- when ----------------------------------------------------------------------------------------------
    def swa_start(self, trainer: Trainer) -> int:
        """The 0-based index of the first epoch that averages."""
        if isinstance(self.swa_epoch_start, int):
            return self.swa_epoch_start - 1
        max_epochs = trainer.max_epochs
        assert max_epochs is not None, "checked in on_fit_start: a fraction needs max_epochs"
        return int(self.swa_epoch_start * max_epochs)

    @property
    def started(self) -> bool:
        return self._average is not None

    @property
    def n_averaged(self) -> int:
        return int(self._average.n_averaged) if self._average is not None else 0

    # -- hooks -------------------------------------------------------------------------------------------
    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if len(trainer.optimizers) != 1:
            raise MisconfigurationException(
                f"StochasticWeightAveraging works with one optimizer; configure_optimizers returned "
                f"{len(trainer.optimizers)}."
            )
        if len(trainer.lr_scheduler_configs) > 1:
            raise MisconfigurationException(
                f"StochasticWeightAveraging replaces one learning-rate scheduler by SWALR; configure_optimizers "
                f"returned {len(trainer.lr_scheduler_configs)}."
            )
        if isinstance(self.swa_epoch_start, float) and trainer.max_epochs in (None, -1):
            raise MisconfigurationException(
                f"swa_epoch_start={self.swa_epoch_start} is a fraction of max_epochs, but max_epochs is not set. "
                "Set max_epochs, or give swa_epoch_start as an epoch number."
            )

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._restored is not None:  # resumed inside the averaging phase
            state, self._restored = self._restored, None
            self._begin(trainer, pl_module)
            assert self._average is not None and self._scheduler is not None
            self._average.load_state_dict(state["average"])
            self._scheduler.load_state_dict(state["scheduler"])
            self._averaged_at_step = state["averaged_at_step"]

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.started and trainer.current_epoch >= self.swa_start(trainer):
            self._begin(trainer, pl_module)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.started:
            self._add(trainer, pl_module)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.started:
            return
        if self._averaged_at_step != trainer.global_step:  # stopped inside an epoch: these weights count too
            self._add(trainer, pl_module)
        assert self._average is not None
        with torch.no_grad():
            for mine, averaged in zip(pl_module.parameters(), self._average.module.parameters()):
                mine.copy_(averaged.to(mine.device))
        self._recompute_batchnorm(trainer, pl_module)
        trainer.strategy.lr_scheduler_configs = self._user_schedulers
        rank_zero_info(
            f"Stochastic weight averaging: the average of {self.n_averaged} epochs' weights is applied."
        )

    # -- the average -----------------------------------------------------------------------------------
    def _begin(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._average = _averaged_copy(pl_module, self.device, self.avg_fn)
        optimizer = trainer.optimizers[0]
        swa_lrs = (
            self.swa_lrs if self.swa_lrs is not None else [group["lr"] for group in optimizer.param_groups]
        )
        # the SWA learning rates become the groups' starting rates: SWALR's base_lrs (kept in checkpoints) and
        # what a scheduler built later on these groups starts from name the rate SWA trains at
        targets = swa_lrs if isinstance(swa_lrs, (list, tuple)) else [swa_lrs] * len(optimizer.param_groups)
        for group, lr in zip(optimizer.param_groups, targets):
            group["initial_lr"] = lr
        self._scheduler = SWALR(
            optimizer, swa_lr=swa_lrs, anneal_epochs=self.annealing_epochs,  # type: ignore[arg-type]
            anneal_strategy=self.annealing_strategy,
        )  # fmt: skip
        self._user_schedulers = trainer.strategy.lr_scheduler_configs
        for config in self._user_schedulers:
            if config.interval == "step":
                rank_zero_warn(
                    "SWA is currently only supported every epoch: the step-wise scheduler "
                    f"`{type(config.scheduler).__name__}` is replaced by SWALR, which steps once an epoch."
                )
            rank_zero_info(f"Swapping scheduler `{type(config.scheduler).__name__}` for `SWALR`.")
        trainer.strategy.lr_scheduler_configs = [LRSchedulerConfig(self._scheduler, name="swa", interval="epoch")]

    def _add(self, trainer: Trainer, pl_module: LightningModule) -> None:
        assert self._average is not None
        self._average.update_parameters(pl_module)
        self._averaged_at_step = trainer.global_step

    def _recompute_batchnorm(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """``swa_utils.update_bn``'s procedure, with ``training_step`` as the forward: running statistics
        reset, then a cumulative average over one pass of the training data."""
        norms = [m for m in pl_module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        loader = trainer.train_dataloader
        if not norms or loader is None:
            return
        momenta = {m: m.momentum for m in norms}
        for m in norms:
            m.reset_running_stats()
            m.momentum = None
        was_training = pl_module.training
        pl_module.train()
        with torch.no_grad():
            for index, batch in enumerate(loader):
                pl_module.training_step(trainer.strategy.batch_to_device(batch), index)
        for m, momentum in momenta.items():
            m.momentum = momentum
        pl_module.train(was_training)

    # -- checkpoints ---------------------------------------------------------------------------------------
    def on_save_checkpoint(
        self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self.started:  # the module's own schedulers, as configure_optimizers will return them on resume
            checkpoint["lr_schedulers"] = [cfg.scheduler.state_dict() for cfg in self._user_schedulers]

    def state_dict(self) -> dict[str, Any]:
        if not self.started:
            return {}
        assert self._average is not None and self._scheduler is not None
        return {"average": self._average.state_dict(), "scheduler": self._scheduler.state_dict(),
                "averaged_at_step": self._averaged_at_step}  # fmt: skip

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = dict(state_dict) if state_dict else None


def _averaged_copy(module: LightningModule, device: torch.device | None, avg_fn: Any) -> AveragedModel:
    """``AveragedModel(module)`` without copying the trainer the module points to."""
    trainer = module._trainer
    module.trainer = None
    try:
        return AveragedModel(module, device=device, avg_fn=avg_fn)
    finally:
        module.trainer = trainer

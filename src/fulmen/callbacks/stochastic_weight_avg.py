"""Stochastic weight averaging, following ``torch.optim.swa_utils``' recipe (``AveragedModel``, ``SWALR``,
BatchNorm statistics recomputed at the end)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor, nn
from torch.optim.swa_utils import SWALR, AveragedModel

from fulmen.core.configure_optimizers import LRSchedulerConfig
from fulmen.core.hooks import Callback
from fulmen.strategies.deepspeed import DeepSpeedStrategy as DeepSpeedStrategy
from fulmen.strategies.fsdp import FSDPStrategy as FSDPStrategy
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

_ANNEALING = ("cos", "linear")
_AVG_FN = Callable[[Tensor, Tensor, Tensor], Tensor]


class StochasticWeightAveraging(Callback):
    """Averages the weights of the last epochs and trains with them.

    - ``swa_epoch_start``: an int is a 1-based epoch number (2: the second epoch); a float in [0, 1] a fraction
      of ``max_epochs`` that becomes that epoch number (0.8 of 10 epochs: 8, the eighth epoch, index 7).
      ``swa_start`` is the 0-based index of that epoch, ``swa_end`` the last epoch's.
    - From that epoch on the learning rate follows ``SWALR`` to ``swa_lrs`` (a float, or a list with one per
      parameter group) over ``annealing_epochs``, stepped once per epoch; the module's own schedulers stop.
      ``swa_lrs`` must be given; ``None`` (what 1.x's ``Trainer(stochastic_weight_avg=True)`` uses) keeps each
      group's current rate.
    - The weights at the end of every epoch from the start epoch through the last are averaged
      (``update_parameters`` with ``avg_fn``, default the running mean) into a copy kept on ``device``. If
      training stops early once averaging began (max_steps, EarlyStopping, max_time), the weights at that point
      join the average.
    - When training ends, the average replaces the module's weights (``transfer_weights``) and BatchNorm
      statistics are recomputed for it (``reset_batch_norm_and_save_state``, then ``reset_momenta``) with one
      pass over the training data (``training_step`` in train mode, no optimizer step).
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
            or (isinstance(swa_epoch_start, float) and 0 <= swa_epoch_start <= 1)
        ):
            raise MisconfigurationException(
                f"swa_epoch_start={swa_epoch_start!r} should be a >0 integer or a float between 0 and 1: an int >= 1 (a "
                "1-based epoch number) or a float in [0, 1] (a fraction of max_epochs)."
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
        if avg_fn is not None and not callable(avg_fn):
            raise MisconfigurationException("The `avg_fn` should be callable.")
        self.swa_lrs = swa_lrs
        self.swa_epoch_start = swa_epoch_start
        self.annealing_epochs = annealing_epochs
        self.annealing_strategy = annealing_strategy
        self._avg_fn = avg_fn or self.avg_fn
        self.device = torch.device(device) if device is not None else None
        self.momenta: dict[nn.modules.batchnorm._BatchNorm, float | None] = {}  # see reset_batch_norm_and_save_state
        self._max_epochs: int | None = None  # the trainer's, from on_fit_start
        self._average: AveragedModel | None = None
        self._scheduler: SWALR | None = None
        self._user_schedulers: list[LRSchedulerConfig] = []
        self._averaged_at_step: int | None = None  # global step of the last weights added to the average
        self._restored: dict[str, Any] | None = None

    # -- when ----------------------------------------------------------------------------------------------
    @property
    def swa_start(self) -> int:
        """The 0-based index of the first epoch that averages (a fraction of ``max_epochs``: once fit started)."""
        start = self.swa_epoch_start
        if isinstance(start, float):
            assert self._max_epochs is not None, "swa_epoch_start is a fraction of max_epochs: known once fit starts"
            start = int(self._max_epochs * start)
        return max(start - 1, 0)

    @property
    def swa_end(self) -> int:
        """The 0-based index of the last epoch that averages: the last epoch (``inf`` with ``max_epochs=-1``)."""
        if self._max_epochs is None:
            raise AttributeError("StochasticWeightAveraging.swa_end is known once fit starts (max_epochs - 1).")
        if self._max_epochs == -1:
            return float("inf")  # type: ignore[return-value]
        return self._max_epochs - 1

    @staticmethod
    def pl_module_contains_batch_norm(pl_module: LightningModule) -> bool:
        """Whether ``pl_module`` has BatchNorm layers (their statistics are recomputed for the average)."""
        return any(isinstance(module, nn.modules.batchnorm._BatchNorm) for module in pl_module.modules())

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
        self._max_epochs = trainer.max_epochs if trainer.max_epochs is not None else -1

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._restored is not None:  # resumed inside the averaging phase
            state, self._restored = self._restored, None
            self._begin(trainer, pl_module)
            assert self._average is not None and self._scheduler is not None
            self._average.load_state_dict(state["average"])
            self._scheduler.load_state_dict(state["scheduler"])
            self._averaged_at_step = state["averaged_at_step"]

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self.started and trainer.current_epoch >= self.swa_start:
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
        average: Any = self._average.module
        self.transfer_weights(average, pl_module)
        self._recompute_batchnorm(trainer, pl_module)
        trainer.strategy.lr_scheduler_configs = self._user_schedulers
        rank_zero_info(
            f"Stochastic weight averaging: the average of {self.n_averaged} epochs' weights is applied."
        )

    # -- the average -----------------------------------------------------------------------------------
    def _begin(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._average = _averaged_copy(pl_module, self.device)
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
        average: Any = self._average.module  # the copy of the LightningModule
        self.update_parameters(average, pl_module, self._average.n_averaged, self._avg_fn)
        self._averaged_at_step = trainer.global_step

    def _recompute_batchnorm(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """``swa_utils.update_bn``'s procedure, with ``training_step`` as the forward: running statistics
        reset, then a cumulative average over one pass of the training data."""
        loader = trainer.train_dataloader
        if not self.pl_module_contains_batch_norm(pl_module) or loader is None:
            return
        self.reset_batch_norm_and_save_state(pl_module)
        was_training = pl_module.training
        pl_module.train()
        try:
            with torch.no_grad():
                for index, batch in enumerate(loader):
                    pl_module.training_step(trainer.strategy.batch_to_device(batch), index)
        finally:
            self.reset_momenta()
            pl_module.train(was_training)

    @staticmethod
    def transfer_weights(src_pl_module: LightningModule, dst_pl_module: LightningModule) -> None:
        """Copy the parameters of ``src_pl_module`` into those of ``dst_pl_module`` (same architecture), each
        onto the device of the one it replaces."""
        for src_param, dst_param in zip(src_pl_module.parameters(), dst_pl_module.parameters()):
            dst_param.detach().copy_(src_param.to(dst_param.device))

    def reset_batch_norm_and_save_state(self, pl_module: LightningModule) -> None:
        """Reset the BatchNorm layers' running statistics (mean 0, variance 1, no batches tracked) and set their
        momentum to None (a cumulative average over the next pass), keeping the momenta in ``self.momenta``
        for :meth:`reset_momenta`. (torch.optim.swa_utils.update_bn's preparation.)"""
        self.momenta = {}
        for module in pl_module.modules():
            if not isinstance(module, nn.modules.batchnorm._BatchNorm) or module.running_mean is None:
                continue  # (a layer without running statistics has none to recompute)
            assert module.running_var is not None and module.num_batches_tracked is not None
            module.running_mean = torch.zeros_like(
                module.running_mean, device=pl_module.device, dtype=module.running_mean.dtype
            )
            module.running_var = torch.ones_like(
                module.running_var, device=pl_module.device, dtype=module.running_var.dtype
            )
            self.momenta[module] = module.momentum
            module.momentum = None
            module.num_batches_tracked *= 0

    def reset_momenta(self) -> None:
        """Give the BatchNorm layers back the momenta :meth:`reset_batch_norm_and_save_state` kept."""
        for bn_module in self.momenta:
            bn_module.momentum = self.momenta[bn_module]

    @staticmethod
    def update_parameters(
        average_model: LightningModule, model: LightningModule, n_averaged: Tensor, avg_fn: _AVG_FN
    ) -> None:
        """Average ``model``'s parameters into ``average_model``'s in place: a copy when ``n_averaged`` is 0,
        else ``avg_fn(averaged, current, n_averaged)``; then ``n_averaged`` (a tensor) is incremented in
        place. (torch.optim.swa_utils.AveragedModel.update_parameters, one parameter at a time.)"""
        for p_swa, p_model in zip(average_model.parameters(), model.parameters()):
            device = p_swa.device
            p_swa_ = p_swa.detach()
            p_model_ = p_model.detach().to(device)
            src = p_model_ if n_averaged == 0 else avg_fn(p_swa_, p_model_, n_averaged.to(device))
            p_swa_.copy_(src)
        n_averaged += 1

    @staticmethod
    def avg_fn(averaged_model_parameter: Tensor, model_parameter: Tensor, num_averaged: Tensor) -> Tensor:
        """The default average: the running mean of the ``num_averaged + 1`` values."""
        return averaged_model_parameter + (model_parameter - averaged_model_parameter) / (num_averaged + 1)

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
        # older torch (2.7 for one) keeps SWALR's annealing function in its state: a function in the checkpoint, which the
        # safe (weights_only) load refuses. The scheduler made again at resume has it from annealing_strategy
        scheduler = {k: v for k, v in self._scheduler.state_dict().items() if k != "anneal_func"}
        return {"average": self._average.state_dict(), "scheduler": scheduler,
                "averaged_at_step": self._averaged_at_step}  # fmt: skip

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = dict(state_dict) if state_dict else None


def _averaged_copy(module: LightningModule, device: torch.device | None) -> AveragedModel:
    """``AveragedModel(module)`` (the copy and its ``n_averaged``) without copying the trainer the module
    points to; the callback's ``update_parameters`` averages into it."""
    trainer = module._trainer
    module.trainer = None
    try:
        return AveragedModel(module, device=device)
    finally:
        module.trainer = trainer

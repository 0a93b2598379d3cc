"""``WeightAveraging`` and ``EMAWeightAveraging``: keep an average of the weights (``torch.optim.swa_utils.
AveragedModel``) next to the trained ones; validate with it, save it, and end training with it."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from fulmen.core.hooks import Callback
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer import Trainer


class WeightAveraging(Callback):
    """Update an ``AveragedModel`` after training steps (``should_update``: by default after every optimizer
    step); ``kwargs`` go to ``AveragedModel`` (``avg_fn`` / ``multi_avg_fn``; the default is the plain mean,
    i.e. SWA). ``use_buffers=True`` (unlike ``AveragedModel``'s default) averages BatchNorm statistics too.

    - Validation runs with the averaged weights (swapped in and out around each validation epoch).
    - A checkpoint's ``state_dict`` holds the averaged weights, so ``load_from_checkpoint`` gives the averaged
      model; the trained weights go to ``current_model_state`` and the average's own state (``n_averaged``) to
      ``averaging_state``, from which a resumed run continues exactly.
    - When training ends the module keeps the averaged weights.
    """

    def __init__(self, device: torch.device | str | int | None = None, use_buffers: bool = True, **kwargs: Any) -> None:
        self._device = device
        self._use_buffers = use_buffers
        self._kwargs = kwargs
        self._average_model: AveragedModel | None = None
        self._latest_update_step = 0
        self._latest_update_epoch = -1

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether to update the average after optimizer step ``step_idx`` (zero-based) or at the end of epoch
        ``epoch_idx`` (one of them is given). Default: after every step. Override to choose."""
        return step_idx is not None

    # -- hooks -----------------------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        pl_module.configure_model()  # so that the copy has every layer (the hook must be idempotent)
        device = torch.device(self._device) if self._device is not None else pl_module.device
        self._average_model = AveragedModel(pl_module, device=device, use_buffers=self._use_buffers, **self._kwargs)

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any, batch_idx: int) -> None:
        # once per optimizer step (an accumulating batch does not step)
        if trainer.global_step > self._latest_update_step and self.should_update(step_idx=trainer.global_step - 1):
            assert self._average_model is not None
            self._average_model.update_parameters(pl_module)
            self._latest_update_step = trainer.global_step

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.current_epoch > self._latest_update_epoch and self.should_update(epoch_idx=trainer.current_epoch):
            assert self._average_model is not None
            self._average_model.update_parameters(pl_module)
            self._latest_update_epoch = trainer.current_epoch

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._average_model is not None:
            self._copy(self._average_model.module, pl_module)

    def on_validation_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._average_model is not None:
            self._swap(pl_module)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._average_model is not None:
            self._swap(pl_module)

    # -- state -----------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"latest_update_step": self._latest_update_step, "latest_update_epoch": self._latest_update_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._latest_update_step = state_dict.get("latest_update_step", 0)
        self._latest_update_epoch = state_dict.get("latest_update_epoch", -1)

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if self._average_model is None:
            return
        average = self._average_model.state_dict()
        checkpoint["current_model_state"] = checkpoint["state_dict"]
        checkpoint["state_dict"] = {k[len("module."):]: v for k, v in average.items() if k.startswith("module.")}
        checkpoint["averaging_state"] = {k: v for k, v in average.items() if not k.startswith("module.")}

    def on_load_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if self._average_model is None:
            return
        if "current_model_state" in checkpoint and "averaging_state" in checkpoint:
            state = {f"module.{k}": v for k, v in checkpoint["state_dict"].items()}
            state.update(checkpoint["averaging_state"])
            self._average_model.load_state_dict(state)
            pl_module.load_state_dict(checkpoint["current_model_state"])  # training goes on from these
            rank_zero_info("Restored the trained weights and the averaged model from the checkpoint.")
        else:
            rank_zero_warn(
                "The checkpoint was not written with weight averaging: the average starts from its weights."
            )
            self._average_model.module.load_state_dict(copy.deepcopy(checkpoint["state_dict"]), strict=False)

    # -- helpers ---------------------------------------------------------------------------------------
    def _tensors(self, module: torch.nn.Module) -> list[torch.Tensor]:
        tensors: list[torch.Tensor] = list(module.parameters())
        if self._use_buffers:
            tensors += list(module.buffers())
        return tensors

    @torch.no_grad()
    def _swap(self, pl_module: LightningModule) -> None:
        assert self._average_model is not None
        for average, current in zip(self._tensors(self._average_model.module), self._tensors(pl_module)):
            kept = current.detach().clone()
            current.copy_(average.to(current.device))
            average.copy_(kept.to(average.device))

    @torch.no_grad()
    def _copy(self, source: torch.nn.Module, target: torch.nn.Module) -> None:
        for src, dst in zip(self._tensors(source), self._tensors(target)):
            dst.copy_(src.to(dst.device))


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average of the weights: ``avg = decay * avg + (1 - decay) * weights`` after
    every ``update_every_n_steps``-th step from step ``update_starting_at_step``; from epoch
    ``update_starting_at_epoch`` on, also at every epoch end."""

    def __init__(
        self,
        device: torch.device | str | int | None = None,
        use_buffers: bool = True,
        decay: float = 0.999,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        update_starting_at_epoch: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"Invalid decay value {decay} provided. Please provide a value in [0,1] range.")
        super().__init__(device=device, use_buffers=use_buffers, multi_avg_fn=get_ema_multi_avg_fn(decay), **kwargs)
        self.decay = decay
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        start_epoch = self.update_starting_at_epoch
        if epoch_idx is not None and start_epoch is not None and epoch_idx >= start_epoch:
            return True
        if step_idx is None:
            return False
        every = self.update_every_n_steps
        start = self.update_starting_at_step
        return every > 0 and step_idx % every == 0 and (start is None or step_idx >= start)

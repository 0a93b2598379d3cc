"""``GlobalBatchSize``: the same number of samples per optimizer step on any number of processes.

An elastic job (``torchrun --nnodes=MIN:MAX``) restarts on the machines that remain after one is lost, or on
more when one joins. Each restart is a new ``fit`` on another number of processes; with the per-process
batch fixed by the DataLoader, the callback sets the gradient accumulation so that every optimizer step
still trains ``size`` samples. Together with the order a resumed run keeps (see "Resuming on another number
of processes" in the checkpointing guide), each step then trains the same samples as in a run that never
changed size, and the weights match it up to floating-point rounding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.callbacks.gradient_accumulation_scheduler import GradientAccumulationScheduler
from fulmen.core.hooks import Callback
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


def per_process_batch_size(loader: Any) -> int | None:
    """The samples per batch of a training loader (the first one of several), ``None`` when it has no fixed
    batch size (a loader with ``batch_size=None`` whose dataset yields whole batches)."""
    if isinstance(loader, (list, tuple)):
        loader = loader[0] if loader else None
    elif isinstance(loader, dict):
        loader = next(iter(loader.values()), None)
    flattened = getattr(loader, "flattened", None)  # a CombinedLoader: its first loader
    if isinstance(flattened, list) and flattened:
        loader = flattened[0]
    size = getattr(loader, "batch_size", None)
    if size is None:
        size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    return int(size) if isinstance(size, int) and size > 0 else None


class GlobalBatchSize(Callback):
    """Keep ``size`` samples per optimizer step, whatever the number of processes.

    At the start of training (and of each epoch, in case the DataLoader is reloaded) it sets
    ``trainer.accumulate_grad_batches = size / (per-process batch size x trainer.world_size)``. A size that
    does not divide into whole batches on every process is refused.

    Example: a job launched with ``torchrun --nnodes=1:2 --nproc-per-node=4`` and ``batch_size=8`` per
    process, with ``GlobalBatchSize(64)``: on 2 nodes (8 processes) each step is one batch per process; when a
    node is lost and the job restarts on the other (4 processes), each step accumulates 2 batches.

    Args:
        size: samples per optimizer step across all processes.

    Raises:
        MisconfigurationException: ``size`` is not a positive int; it is not a multiple of the per-process
            batch size times the number of processes; the training loader has no fixed batch size; the
            Trainer also sets ``accumulate_grad_batches`` or a ``GradientAccumulationScheduler`` runs.
        RuntimeError: the module uses manual optimization.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise MisconfigurationException(
                f"GlobalBatchSize(size={size!r}): pass the number of samples per optimizer step across all "
                "processes, a positive int (e.g. GlobalBatchSize(256))."
            )
        self.size = size

    def accumulation(self, batch_size: int, world_size: int) -> int:
        """The accumulation that makes each optimizer step train ``size`` samples."""
        per_batch = batch_size * world_size
        if self.size % per_batch:
            lower, upper = (self.size // per_batch) * per_batch, (self.size // per_batch + 1) * per_batch
            choices = f"{lower} or {upper}" if lower else str(upper)
            raise MisconfigurationException(
                f"GlobalBatchSize(size={self.size}): each batch trains {per_batch} samples across the processes "
                f"(batch_size={batch_size} per process x {world_size} processes), which does not divide {self.size}. "
                f"Use a size that is a multiple of {per_batch} (e.g. {choices}), or a batch_size / number of "
                "processes whose product divides it."
            )
        return self.size // per_batch

    def _apply(self, trainer: Trainer) -> None:
        batch_size = per_process_batch_size(trainer.train_dataloader)
        if batch_size is None:
            raise MisconfigurationException(
                f"GlobalBatchSize(size={self.size}) needs the training DataLoader's batch_size (samples per "
                "process and batch), but the loader has none (batch_size=None?). Give the DataLoader a batch_size."
            )
        factor = self.accumulation(batch_size, trainer.world_size)
        if factor != trainer.accumulate_grad_batches:
            rank_zero_info(
                f"GlobalBatchSize({self.size}): {trainer.world_size} process(es) x batch_size={batch_size}: "
                f"accumulating {factor} batch(es) per optimizer step."
            )
        trainer.accumulate_grad_batches = factor

    # -- hooks ----------------------------------------------------------------------------------------
    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not pl_module.automatic_optimization:
            raise RuntimeError(
                f"GlobalBatchSize sets the gradient accumulation, which needs automatic optimization, but "
                f"{type(pl_module).__name__} sets `automatic_optimization = False`. Remove the callback and "
                "accumulate in training_step."
            )
        configured = trainer.config.accumulate_grad_batches
        if configured != 1:
            raise MisconfigurationException(
                f"GlobalBatchSize({self.size}) sets the accumulation itself, but the Trainer was given "
                f"accumulate_grad_batches={configured}. Remove one of them."
            )
        if any(isinstance(cb, GradientAccumulationScheduler) for cb in trainer.callbacks):
            raise MisconfigurationException(
                f"GlobalBatchSize({self.size}) and a GradientAccumulationScheduler both set the accumulation. "
                "Remove one of them."
            )
        self._apply(trainer)

    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._apply(trainer)  # a reloaded DataLoader may have another batch size

    # -- checkpoints ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"size": self.size}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = int(state_dict.get("size", self.size))
        if saved != self.size:
            rank_zero_warn(
                f"GlobalBatchSize: the checkpoint was trained with {saved} samples per optimizer step, this run "
                f"asks for {self.size}: continuing with {self.size} (the steps from here on differ from the "
                "interrupted run's)."
            )

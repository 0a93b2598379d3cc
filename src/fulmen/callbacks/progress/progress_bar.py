"""The base of the progress bars: what a bar shows (``get_metrics``) and how far each stage goes (the totals)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.core.hooks import Callback
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


class ProgressBar(Callback):
    """Base class of progress bars. Subclasses draw; this class answers what to draw:

    - ``get_metrics``: ``v_num`` (the logger's version) plus the metrics logged with ``prog_bar=True``;
    - the totals: ``total_train_batches``, ``total_val_batches``, and per dataloader of an evaluation run
      ``total_val_batches_current_dataloader`` (sanity check included), ``total_test_...``, ``total_predict_...``;
    - the stage names shown in front of a bar (``train_description`` ...), to override.
    """

    def __init__(self) -> None:
        self._trainer: Trainer | None = None
        self._current_eval_dataloader_idx: int | None = None

    @property
    def trainer(self) -> Trainer:
        if self._trainer is None:
            raise TypeError(f"The `{type(self).__name__}._trainer` reference has not been set yet.")
        return self._trainer

    @property
    def sanity_check_description(self) -> str:
        return "Sanity Checking"

    @property
    def train_description(self) -> str:
        return "Training"

    @property
    def validation_description(self) -> str:
        return "Validation"

    @property
    def test_description(self) -> str:
        return "Testing"

    @property
    def predict_description(self) -> str:
        return "Predicting"

    # -- totals ---------------------------------------------------------------------------------------
    @property
    def total_train_batches(self) -> int | float:
        """Training batches per epoch (``inf`` for a loader without a length)."""
        return self.trainer.num_training_batches

    @property
    def total_val_batches_current_dataloader(self) -> int | float:
        """Batches of the validation loader being run (of the sanity check while it runs)."""
        idx = self._current_eval_dataloader_idx or 0
        batches = self.trainer.num_sanity_val_batches if self.trainer.sanity_checking else self.trainer.num_val_batches
        return batches[idx] if idx < len(batches) else 0

    @property
    def total_test_batches_current_dataloader(self) -> int | float:
        idx = self._current_eval_dataloader_idx or 0
        batches = self.trainer.num_test_batches
        return batches[idx] if idx < len(batches) else 0

    @property
    def total_predict_batches_current_dataloader(self) -> int | float:
        idx = self._current_eval_dataloader_idx or 0
        batches = self.trainer.num_predict_batches
        return batches[idx] if idx < len(batches) else 0

    @property
    def total_val_batches(self) -> int | float:
        """Validation batches the current training epoch runs (0 when validation does not run in it)."""
        trainer = self.trainer
        every = trainer.check_val_every_n_epoch
        if trainer.num_val_batches and (every is None or (trainer.current_epoch + 1) % every == 0):
            return sum(trainer.num_val_batches)
        return 0

    def has_dataloader_changed(self, dataloader_idx: int) -> bool:
        """Whether an evaluation run just moved on to loader ``dataloader_idx`` (its bar then restarts)."""
        old, self._current_eval_dataloader_idx = self._current_eval_dataloader_idx, dataloader_idx
        return old != dataloader_idx

    def reset_dataloader_idx_tracker(self) -> None:
        self._current_eval_dataloader_idx = None

    # -- switches and output --------------------------------------------------------------------------
    def disable(self) -> None:
        """Stop drawing (the trainer calls this on ranks other than zero)."""

    def enable(self) -> None:
        """Draw again."""

    @property
    def is_enabled(self) -> bool:
        return True

    @property
    def is_disabled(self) -> bool:
        return not self.is_enabled

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``LightningModule.print`` lands here: printed so that it does not break the bar."""
        print(*args, **kwargs)

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self._trainer = trainer
        if not trainer.is_global_zero:
            self.disable()

    def get_metrics(self, trainer: Trainer, pl_module: LightningModule) -> dict[str, int | str | float | dict[str, float]]:
        """What the bar shows after its counter: ``v_num`` and the ``prog_bar`` metrics. Override to change it
        (e.g. ``items.pop("v_num", None)``)."""
        items: dict[str, Any] = dict(get_standard_metrics(trainer))
        items.update(trainer.progress_bar_metrics)
        return items


class RefreshingBar(ProgressBar):
    """A bar drawn every ``refresh_rate`` batches (0 turns it off), switched off on ranks other than zero."""

    def __init__(self, refresh_rate: int = 1) -> None:
        super().__init__()
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 0:
            raise ValueError(
                f"{type(self).__name__}(refresh_rate={refresh_rate!r}) must be an int >= 0 (0 disables the bar)."
            )
        self._refresh_rate = refresh_rate
        self._enabled = True

    @property
    def refresh_rate(self) -> int:
        return self._refresh_rate

    @property
    def is_enabled(self) -> bool:
        return self._enabled and self._refresh_rate > 0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def _should_update(self, current: int, total: int | float) -> bool:
        """Every ``refresh_rate`` batches, and at the last one."""
        return self.is_enabled and (current % self._refresh_rate == 0 or current == total)


def get_standard_metrics(trainer: Trainer) -> dict[str, int | str]:
    """The metrics every bar shows whatever was logged: ``v_num``, the logger's version."""
    logger = trainer.logger
    if logger is None or logger.version is None or logger.version == "":  # "" : a DummyLogger (fast_dev_run)
        return {}
    version = logger.version
    return {"v_num": version[-4:] if isinstance(version, str) else version}

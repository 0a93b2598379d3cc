"""``LearningRateFinder``: the learning-rate range test as a callback, run when fit starts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fulmen.core.hooks import Callback
from fulmen.tuner.lr_finder import LRFinder, lr_find
from fulmen.utilities.exceptions import _TunerExitException
from fulmen.utilities.rank_zero import rank_zero_info
from fulmen.utilities.seed import isolate_rng as isolate_rng

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


class LearningRateFinder(Callback):
    """Runs the range test before fit trains and writes the suggestion to the module's learning rate
    (``attr_name``, else ``lr`` / ``learning_rate``); the finder is in ``optimal_lr`` afterwards. fit then
    builds its optimizers again, with the suggested rate. Not run when fit resumes from a checkpoint."""

    SUPPORTED_MODES = ("linear", "exponential")

    def __init__(
        self,
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training_steps: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> None:
        mode = mode.lower()
        if mode not in self.SUPPORTED_MODES:
            raise ValueError(f"`mode` should be either of {self.SUPPORTED_MODES}")
        # the arguments under Lightning's attribute names (subclasses and libraries read and set them)
        self._min_lr = min_lr
        self._max_lr = max_lr
        self._num_training_steps = num_training_steps
        self._mode = mode
        self._early_stop_threshold = early_stop_threshold
        self._update_attr = update_attr
        self._attr_name = attr_name
        self._early_exit = False  # True: the fit ends once the search is done (what Tuner.lr_find does)
        self.optimal_lr: LRFinder | None = None
        self._done = False

    def lr_find(self, trainer: Trainer, pl_module: LightningModule) -> None:
        train = trainer.run_context.data.passed("train")
        self.optimal_lr = lr_find(
            trainer, pl_module, train_dataloaders=train, datamodule=trainer.datamodule, min_lr=self._min_lr,
            max_lr=self._max_lr, num_training=self._num_training_steps, mode=self._mode,
            early_stop_threshold=self._early_stop_threshold, update_attr=self._update_attr, attr_name=self._attr_name,
        )  # fmt: skip
        self._done = True
        if self._early_exit:
            raise _TunerExitException()
        if self._update_attr and self.optimal_lr is not None and self.optimal_lr.suggestion() is not None:
            # configure_optimizers already ran with the old rate: build the optimizers again
            trainer.strategy.setup_optimizers(trainer)

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self._done:
            return
        if trainer.ckpt_path is not None:  # the optimizer state of the checkpoint holds the learning rate
            rank_zero_info(
                "LearningRateFinder: resuming from a checkpoint, so the learning rate is not searched."
            )
            self._done = True
            return
        self.lr_find(trainer, pl_module)

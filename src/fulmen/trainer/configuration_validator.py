"""``lightning.pytorch.trainer.configuration_validator``: before a stage runs, :class:`fulmen.trainer.runner.
StageRunner` checks that the model and data have what the stage needs (``training_step``,
``configure_optimizers`` and training data for fit; ``validation_step`` / ``test_step`` for validate / test;
predict data for predict) and that manual optimization is not combined with ``gradient_clip_val``,
``accumulate_grad_batches`` or an ``optimizer_idx`` argument; it raises ``MisconfigurationException`` naming
what is missing."""

from fulmen.trainer.runner import StageRunner

__all__ = ["StageRunner"]

"""``lightning.pytorch.loops.training_epoch_loop``: one training epoch is
:class:`fulmen.loops.training_epoch.TrainingEpochLoop`."""

from fulmen.loops.training_epoch import TrainingEpochLoop

__all__ = ["RestartStage", "TrainingEpochLoop"]

# Lightning's name for this loop (its test suites and some programs import or patch it)
_TrainingEpochLoop = TrainingEpochLoop


class RestartStage:
    """Where a restored training epoch restarts, as plain strings (what code that reads a Lightning epoch
    loop's restart stage compares with)."""

    NONE = "none"
    RESTARTED_ON_TRAIN_BATCH_END = "restarted_on_train_batch_end"
    RESTARTED_ON_LAST = "restarted_on_last"

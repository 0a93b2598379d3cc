"""``Checkpoint``: the base class of checkpointing callbacks (``ModelCheckpoint``, ``OnExceptionCheckpoint``).

Libraries test ``isinstance(callback, Checkpoint)`` to find a run's checkpointing; the trainer also adds no
default ``ModelCheckpoint`` when one is given.
"""

from __future__ import annotations

from fulmen.core.hooks import Callback


class Checkpoint(Callback):
    """Base class of checkpointing callbacks (the trainer runs them after the other callbacks, and their
    epoch-end hooks after the module's, so a metric logged in ``on_train_epoch_end`` can be monitored)."""

    _is_checkpoint_callback = True
    _is_monitoring_callback = True

"""Lightning's strategy hooks, which do nothing here: a strategy subclass overrides those it needs (a mixin of
``Strategy``)."""

from __future__ import annotations

from typing import Any

from torch import Tensor


class _HooksMixin:
    """The hooks the loops and the trainer call on a strategy; the loops call the per-batch ones only when a
    subclass overrides them."""

    def on_exception(self, exception: BaseException) -> None:
        """The run raised ``exception`` (not an interrupt); called before the callbacks hear of it."""

    # -- Lightning's strategy hooks: the loops call them after the module's hook of the same name (the
    # per-batch ones only when a subclass overrides them) ------------------------------------------------------
    def on_train_start(self) -> None:
        """Called when training begins."""

    def on_validation_start(self) -> None:
        """Called when a validation run begins."""

    def on_test_start(self) -> None:
        """Called when testing begins."""

    def on_predict_start(self) -> None:
        """Called when predicting begins."""

    def on_train_end(self) -> None:
        """Called when training ends."""

    def on_validation_end(self) -> None:
        """Called when a validation run ends."""

    def on_test_end(self) -> None:
        """Called when testing ends."""

    def on_predict_end(self) -> None:
        """Called when predicting ends."""

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        """Called in the training loop before anything happens for that batch (after the module's hook)."""

    def pre_backward(self, closure_loss: Tensor) -> None:
        """Called before the precision plugin runs backward."""

    def post_backward(self, closure_loss: Tensor) -> None:
        """Called after the precision plugin ran backward (``closure_loss`` detached)."""

    def post_training_step(self) -> None:
        """Called right after each ``training_step`` (Lightning keeps it, deprecated, for older strategies:
        override :meth:`training_step` instead)."""

    def process_dataloader(self, dataloader: object) -> object:
        """The loader the loops iterate, from each loader of the run (after its distributed sampler is set):
        a strategy may wrap it. The loader itself by default."""
        return dataloader

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        """Add this class's names to ``strategy_registry`` (``StrategyRegistry``); nothing for the base class."""

    def prepare_for_tuning(self) -> None:
        """What a tuner run before fit needs set up (several processes: their process group)."""

"""``ModelSummary``: print the model's layers and parameter counts when fitting starts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.callbacks.callback import Callback
from fulmen.utilities.model_summary import summarize
from fulmen.utilities.rank_zero import rank_zero_only

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


class ModelSummary(Callback):
    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        super().__init__()
        self._max_depth = max_depth
        self._kwargs = summarize_kwargs

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._max_depth:
            return
        self._print(str(summarize(pl_module, max_depth=self._max_depth)))

    @staticmethod
    @rank_zero_only
    def _print(text: str) -> None:
        print(text)

"""``ModelSummary``: print the model's layers and parameter counts when fitting starts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.core.hooks import Callback
from fulmen.utilities.model_summary import format_summary_table, summarize
from fulmen.utilities.model_summary.model_summary import ModelSummary as Summary  # noqa: F401  (Lightning's name)
from fulmen.utilities.model_summary.model_summary_deepspeed import DeepSpeedSummary as DeepSpeedSummary

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


class ModelSummary(Callback):
    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        # not cooperative, as Lightning's: a subclass mixing in another class calls that class's __init__ itself,
        # and it must run once
        self._max_depth = max_depth
        self._kwargs = summarize_kwargs

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._max_depth:
            return
        summary = summarize(pl_module, max_depth=self._max_depth)
        if trainer.is_global_zero:
            self.summarize(
                summary.get_summary_data(), summary.total_parameters, summary.trainable_parameters,
                summary.model_size, summary.total_training_modes, total_flops=summary.total_flops, **self._kwargs,
            )  # fmt: skip

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        """Print the table of ``summary_data`` (columns as ``(header, cells)``) and the totals below it; what
        ``on_fit_start`` calls on global rank 0 with the model's summary (override to show it elsewhere)."""
        print(format_summary_table(
            total_parameters, trainable_parameters, model_size, total_training_modes, total_flops, *summary_data
        ))  # fmt: skip

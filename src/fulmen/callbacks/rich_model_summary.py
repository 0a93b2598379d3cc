"""``RichModelSummary``: the layer table of ``ModelSummary`` drawn with ``rich`` (``pip install 'fulmen[rich]'``;
``rich`` is imported when it is made)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.callbacks.model_summary import ModelSummary
from fulmen.utilities.imports import require
from fulmen.utilities.model_summary import _human, summarize
from fulmen.utilities.rank_zero import rank_zero_only

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


class RichModelSummary(ModelSummary):
    """``ModelSummary`` drawn as a rich table, with the parameter totals below it."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        require("rich", "rich", "RichModelSummary")
        super().__init__(max_depth=max_depth, **summarize_kwargs)

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._max_depth:
            return
        self._print_table(summarize(pl_module, max_depth=self._max_depth, **self._kwargs))

    @staticmethod
    @rank_zero_only
    def _print_table(summary: Any) -> None:
        from rich.console import Console
        from rich.table import Table

        table = Table(header_style="bold magenta")
        for column, justify in (("", "right"), ("Name", "left"), ("Type", "left"), ("Params", "right"), ("Mode", "left")):
            table.add_column(column, justify=justify)  # type: ignore[arg-type]
        for i, (name, kind, params, mode) in enumerate(summary.rows):
            table.add_row(str(i), name, kind, _human(params), mode)
        console = Console()
        console.print(table)
        trainable, total = summary.trainable_parameters, summary.total_parameters
        console.print(f"[bold]Trainable params[/]: {_human(trainable)}")
        console.print(f"[bold]Non-trainable params[/]: {_human(total - trainable)}")
        console.print(f"[bold]Total params[/]: {_human(total)}")
        console.print(f"[bold]Total estimated model params size (MB)[/]: {summary.model_size_mb:.3f}")

"""``RichModelSummary``: the layer table of ``ModelSummary`` drawn with ``rich`` (``pip install 'fulmen[rich]'``;
``rich`` is imported when it is made)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.callbacks.model_summary import ModelSummary
from fulmen.utilities.imports import _RICH_AVAILABLE as _RICH_AVAILABLE
from fulmen.utilities.imports import require
from fulmen.utilities.model_summary import get_formatted_model_size, get_human_readable_count, summarize
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
        header_style = self._kwargs.get("header_style", "bold magenta")
        self._print_table(summarize(pl_module, max_depth=self._max_depth), header_style)

    @staticmethod
    @rank_zero_only
    def _print_table(summary: Any, header_style: str) -> None:
        from rich.console import Console
        from rich.table import Table

        columns = summary.get_summary_data()
        table = Table(header_style=header_style)
        for header, _ in columns:
            right = header in ("Params", "Params per Device", "FLOPs", "In sizes", "Out sizes")
            table.add_column(header, justify="right" if right else "left", style="dim" if header == " " else None)
        for row in zip(*(cells for _, cells in columns)):
            table.add_row(*row)
        console = Console()
        console.print(table)
        trainable, total, modes = summary.trainable_parameters, summary.total_parameters, summary.total_training_modes
        console.print(f"[bold]Trainable params[/]: {get_human_readable_count(trainable):<10}")
        console.print(f"[bold]Non-trainable params[/]: {get_human_readable_count(total - trainable):<10}")
        console.print(f"[bold]Total params[/]: {get_human_readable_count(total):<10}")
        size = get_formatted_model_size(summary.model_size)
        console.print(f"[bold]Total estimated model params size (MB)[/]: {size:<10}")
        console.print(f"[bold]Modules in train mode[/]: {modes['train']}")
        console.print(f"[bold]Modules in eval mode[/]: {modes['eval']}")
        console.print(f"[bold]Total FLOPs[/]: {get_human_readable_count(summary.total_flops)}")

"""``RichModelSummary``: the layer table of ``ModelSummary`` drawn with ``rich`` (``pip install 'fulmen[rich]'``;
``rich`` is imported when it is made)."""

from __future__ import annotations

from typing import Any

from fulmen.callbacks.model_summary import ModelSummary
from fulmen.utilities.imports import _RICH_AVAILABLE as _RICH_AVAILABLE
from fulmen.utilities.imports import require
from fulmen.utilities.model_summary import get_formatted_model_size, get_human_readable_count


class RichModelSummary(ModelSummary):
    """``ModelSummary`` drawn as a rich table, with the parameter totals below it."""

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        require("rich", "rich", "RichModelSummary", available=_RICH_AVAILABLE)
        super().__init__(max_depth=max_depth, **summarize_kwargs)

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
        """Print ``summary_data`` (columns as ``(header, cells)``) as a rich table (``header_style`` in
        ``summarize_kwargs``, default ``"bold magenta"``), then the totals."""
        from rich import get_console
        from rich.table import Table

        columns = summary_data
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        for header, _ in columns:
            right = header in ("Params", "Params per Device", "FLOPs", "In sizes", "Out sizes")
            table.add_column(header, justify="right" if right else "left", style="dim" if header == " " else None)
        for row in zip(*(cells for _, cells in columns)):
            table.add_row(*row)
        console = get_console()
        console.print(table)
        trainable, total, modes = trainable_parameters, total_parameters, total_training_modes
        console.print(f"[bold]Trainable params[/]: {get_human_readable_count(trainable):<10}")
        console.print(f"[bold]Non-trainable params[/]: {get_human_readable_count(total - trainable):<10}")
        console.print(f"[bold]Total params[/]: {get_human_readable_count(total):<10}")
        size = get_formatted_model_size(model_size)
        console.print(f"[bold]Total estimated model params size (MB)[/]: {size:<10}")
        console.print(f"[bold]Modules in train mode[/]: {modes['train']}")
        console.print(f"[bold]Modules in eval mode[/]: {modes['eval']}")
        console.print(f"[bold]Total FLOPs[/]: {get_human_readable_count(total_flops)}")

"""Model summaries: the layer table the ``ModelSummary`` callback prints (``summarize(module)``), and its DeepSpeed
ZeRO-3 variant counting partitioned parameters."""

from fulmen.utilities.model_summary.model_summary import (
    LayerSummary,
    ModelSummary,
    format_summary_table,
    get_formatted_model_size,
    get_human_readable_count,
    parse_batch_shape,
    summarize,
)
from fulmen.utilities.model_summary.model_summary_deepspeed import DeepSpeedSummary

__all__ = [
    "DeepSpeedSummary",
    "LayerSummary",
    "ModelSummary",
    "format_summary_table",
    "get_formatted_model_size",
    "get_human_readable_count",
    "parse_batch_shape",
    "summarize",
]

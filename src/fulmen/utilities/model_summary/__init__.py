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

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})

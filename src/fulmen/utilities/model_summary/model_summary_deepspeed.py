"""The model summary of a model whose parameters DeepSpeed ZeRO stage 3 partitions across processes.

A partitioned parameter is empty on each process; DeepSpeed records its full size as ``ds_numel`` and this
process's share as ``partition_numel()``. The summary reads those attributes only, so it needs no ``deepspeed``
import (and works on any parameter that carries them).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from fulmen.utilities.imports import RequirementCache as RequirementCache
from fulmen.utilities.model_summary.model_summary import (
    LayerSummary,
    ModelSummary,
    _counts,
    get_human_readable_count,
)


def deepspeed_param_size(p: torch.nn.Parameter) -> int:
    """The full number of elements of a ZeRO-3 partitioned parameter (DeepSpeed's ``ds_numel``)."""
    if not hasattr(p, "ds_numel"):
        raise AssertionError(
            f"deepspeed_param_size: the parameter of shape {tuple(p.shape)} has no `ds_numel`; only parameters "
            "partitioned by DeepSpeed ZeRO stage 3 have one (use `p.numel()` for others)."
        )
    return int(p.ds_numel)


def _partition_size(p: Any) -> int:
    # DeepSpeed renamed the method in 0.6.6; older releases only have `partitioned_size`
    method = getattr(p, "partition_numel", None) or p.partitioned_size
    return int(method())


class DeepSpeedLayerSummary(LayerSummary):
    """A layer's row with its parameters counted at their full (unpartitioned) size."""

    @staticmethod
    def _parameter_size(p: torch.Tensor) -> int:
        return deepspeed_param_size(p)  # type: ignore[arg-type]

    @property
    def average_shard_parameters(self) -> int:
        """How many of the layer's parameters this process holds."""
        return sum(_partition_size(p) for p in self._module.parameters() if _counts(p))


class DeepSpeedSummary(ModelSummary):
    """:class:`ModelSummary` with full parameter counts and a 'Params per Device' column (this process's share)."""

    _layer_summary_class = DeepSpeedLayerSummary

    def __init__(self, model: nn.Module, max_depth: int = 1) -> None:
        super().__init__(model, max_depth=max_depth)

    @property
    def parameters_per_layer(self) -> list[int]:
        return [layer.average_shard_parameters for layer in self._layer_summary.values()]  # type: ignore[attr-defined]

    def _columns(self) -> list[tuple[str, list[str]]]:
        columns = super()._columns()
        after_params = [header for header, _ in columns].index("Params") + 1
        per_device = [get_human_readable_count(n) for n in self.parameters_per_layer]
        columns.insert(after_params, ("Params per Device", per_device))
        return columns

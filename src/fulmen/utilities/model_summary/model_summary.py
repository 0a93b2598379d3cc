"""The layer table of a module: names, types, parameter counts, train/eval mode, FLOPs and, when the module has an
``example_input_array``, each layer's input and output shapes (what the ``ModelSummary`` callback prints).

The table's text is Lightning's, character for character: programs and tests compare it, and logs of runs on
either framework read the same.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from fulmen.utilities.apply_func import move_data_to_device
from fulmen.utilities.model_helpers import is_overridden
from fulmen.utilities.rank_zero import WarningCache, rank_zero_warn

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

UNKNOWN_SIZE = "?"
LEFTOVER_PARAMS_NAME = "other params"
NOT_APPLICABLE = "n/a"
PARAMETER_NUM_UNITS = [" ", "K", "M", "B", "T"]

# bits per parameter for the size estimate; a mixed precision keeps its weights in 32 bits (and warns)
_PRECISION_BITS = {"64": 64, "32": 32, "16": 16, "bf16": 16, "16-true": 16, "bf16-true": 16, "32-true": 32,
                   "64-true": 64}  # fmt: skip

_warnings = WarningCache()
warning_cache = _warnings  # Lightning's name of this module's cache


def get_human_readable_count(number: int) -> str:
    """``number`` with a thousands unit: ``123`` -> ``'123  '``, ``1234`` -> ``'1.2 K'``, ``2e6`` -> ``'2.0 M'``;
    units stop at trillions (``5e15`` -> ``'5,000 T'``). Below 100 of a unit one decimal is shown."""
    if number < 0:
        raise AssertionError(f"get_human_readable_count(number={number!r}): the number must be >= 0.")
    digits = math.floor(math.log10(number)) + 1 if number > 0 else 1
    unit = min(math.ceil(digits / 3), len(PARAMETER_NUM_UNITS)) - 1
    # multiplied by a negative power of ten, not divided: the same float rounding as Lightning's tables
    scaled = number * (10 ** (-3 * unit))
    label = PARAMETER_NUM_UNITS[unit]
    if unit == 0 or scaled >= 100:
        return f"{int(scaled):,d} {label}"
    return f"{scaled:,.1f} {label}"


def get_formatted_model_size(total_model_size: float) -> str:
    """Megabytes with three decimals and thousands separators: ``1234.5`` -> ``'1,234.500'``."""
    return f"{total_model_size:,.3f}"


def parse_batch_shape(batch: Any) -> str | list[Any]:
    """The shape of a tensor (anything with ``.shape``) as a list, nested for lists and tuples of them; ``'?'``
    for anything else."""
    if hasattr(batch, "shape"):
        return list(batch.shape)
    if isinstance(batch, (list, tuple)):
        return [parse_batch_shape(item) for item in batch]
    return UNKNOWN_SIZE


def _counts(p: torch.Tensor) -> bool:
    """False for a lazy module's parameter that has no shape yet (its size is unknown until a forward pass)."""
    if not isinstance(p, nn.parameter.UninitializedParameter) or _is_dtensor(p):
        return True
    warning_cache.warn(  # the module's name, read now: patching or clearing it reaches this
        "The total number of parameters detected may be inaccurate because the model contains an instance of "
        "`UninitializedParameter`. To get an accurate number, set `self.example_input_array` in your "
        "LightningModule."
    )
    return False


def _is_dtensor(p: torch.Tensor) -> bool:
    if not torch.distributed.is_available():
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(p, DTensor)


class LayerSummary:
    """One layer's row: its type, parameter count and mode, and its input/output shapes, recorded by a forward
    hook the first time the layer runs (``'?'`` until then, or if it never runs)."""

    def __init__(self, module: nn.Module) -> None:
        self._module = module
        self._in_size: str | list[Any] | None = None
        self._out_size: str | list[Any] | None = None
        self._hook_handle: RemovableHandle | None = None
        if not isinstance(module, torch.jit.ScriptModule):  # script modules take no Python hooks
            self._hook_handle = module.register_forward_hook(self._record, with_kwargs=True)

    def __del__(self) -> None:
        self.detach_hook()

    def _record(self, _: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None, out: Any) -> None:
        inputs: Any = (*args, *kwargs.values()) if kwargs else args
        self._in_size = parse_batch_shape(inputs[0] if len(inputs) == 1 else inputs)
        self._out_size = parse_batch_shape(out)
        self.detach_hook()  # a layer called again (shared, recurrent) keeps its first shapes

    def detach_hook(self) -> None:
        """Remove the forward hook (done once the summary has run the example input)."""
        if self._hook_handle is not None:
            self._hook_handle.remove()

    @property
    def in_size(self) -> str | list[Any]:
        return self._in_size or UNKNOWN_SIZE

    @property
    def out_size(self) -> str | list[Any]:
        return self._out_size or UNKNOWN_SIZE

    @property
    def layer_type(self) -> str:
        return type(self._module).__name__

    @property
    def num_parameters(self) -> int:
        return sum(self._parameter_size(p) for p in self._module.parameters() if _counts(p))

    @property
    def training(self) -> bool:
        return self._module.training

    @staticmethod
    def _parameter_size(p: torch.Tensor) -> int:
        return p.numel()


class ModelSummary:
    """The summary of ``model`` down to ``max_depth`` levels of submodules (``-1``: all, ``0``: none).

    Built at once: with an ``example_input_array`` the model runs it once (in eval mode, without gradients, in
    the trainer's precision) to record shapes and count FLOPs. ``str(summary)`` is the table.
    """

    _layer_summary_class: type[LayerSummary] = LayerSummary

    def __init__(self, model: nn.Module, max_depth: int = 1) -> None:
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < -1:
            raise ValueError(
                f"`max_depth` can be -1, 0 or > 0, got {max_depth}: ModelSummary(max_depth={max_depth!r}) takes -1 "
                "(every layer), 0 (no layer rows) or the number of levels of submodules to show."
            )
        from torch.utils.flop_counter import FlopCounterMode

        self._model = model
        self._max_depth = max_depth
        self._flop_counter = FlopCounterMode(display=False, depth=max_depth + 1)
        self._layer_summary = self.summarize()
        trainer = _trainer_of(model)
        precision = getattr(trainer, "precision", None) if trainer is not None else None
        if trainer is not None and precision not in _PRECISION_BITS:
            rank_zero_warn(
                f"Precision {precision} is not supported by the model summary.  Estimated model size in MB will not "
                "be accurate. Using 32 bits instead.",
                category=UserWarning,
            )
        self._precision_megabytes = _PRECISION_BITS.get(str(precision), 32) / 8.0 * 1e-6

    # -- which layers --------------------------------------------------------------------------------------
    @property
    def named_modules(self) -> list[tuple[str, nn.Module]]:
        """The layers to hook: none, the direct children (depth 1), or every submodule (trimmed to the depth once
        the example input has run)."""
        if self._max_depth == 0:
            return []
        if self._max_depth == 1:
            return list(self._model.named_children())
        return list(self._model.named_modules())[1:]

    def summarize(self) -> dict[str, LayerSummary]:
        summary = {name: self._layer_summary_class(module) for name, module in self.named_modules}
        if _example_input(self._model) is not None:
            self._forward_example_input()
        for layer in summary.values():
            layer.detach_hook()
        if self._max_depth >= 1:
            summary = {name: layer for name, layer in summary.items() if name.count(".") < self._max_depth}
        return summary

    def _forward_example_input(self) -> None:
        model = self._model
        trainer = _trainer_of(model)
        batch = _transfer_to_device(model, trainer, _example_input(model))
        modes = {m: m.training for m in model.modules()}
        model.eval()
        precision = getattr(trainer, "precision_plugin", None) if trainer is not None else None
        forward_context = precision.forward_context() if precision is not None else contextlib.nullcontext()
        try:
            with torch.no_grad(), forward_context, self._flop_counter:
                if isinstance(batch, (list, tuple)):
                    model(*batch)
                elif isinstance(batch, dict):
                    model(**batch)
                else:
                    model(batch)
        finally:
            for module, training in modes.items():
                module.training = training

    # -- per layer -----------------------------------------------------------------------------------------
    @property
    def layer_names(self) -> list[str]:
        return list(self._layer_summary)

    @property
    def layer_types(self) -> list[str]:
        return [layer.layer_type for layer in self._layer_summary.values()]

    @property
    def in_sizes(self) -> list[Any]:
        return [layer.in_size for layer in self._layer_summary.values()]

    @property
    def out_sizes(self) -> list[Any]:
        return [layer.out_size for layer in self._layer_summary.values()]

    @property
    def param_nums(self) -> list[int]:
        return [layer.num_parameters for layer in self._layer_summary.values()]

    @property
    def training_modes(self) -> list[bool]:
        return [layer.training for layer in self._layer_summary.values()]

    @property
    def flop_counts(self) -> dict[str, dict[Any, int]]:
        """Each shown layer's FLOPs per operator (empty without an example input)."""
        counts = self._flop_counter.get_flop_counts()
        prefix = type(self._model).__name__
        return {name: dict(counts.get(f"{prefix}.{name}", {})) for name in self.layer_names}

    # -- totals --------------------------------------------------------------------------------------------
    @property
    def total_training_modes(self) -> dict[str, int]:
        """How many submodules (the root left out) are in train and in eval mode."""
        modes = [m.training for m in list(self._model.modules())[1:]]
        return {"train": modes.count(True), "eval": modes.count(False)}

    @property
    def total_parameters(self) -> int:
        size = self._layer_summary_class._parameter_size
        return sum(size(p) for p in self._model.parameters() if _counts(p))

    @property
    def trainable_parameters(self) -> int:
        size = self._layer_summary_class._parameter_size
        return sum(size(p) for p in self._model.parameters() if p.requires_grad and _counts(p))

    @property
    def total_layer_params(self) -> int:
        return sum(self.param_nums)

    @property
    def model_size(self) -> float:
        """Estimated size of the parameters in MB, at the trainer's precision (32 bits without a trainer)."""
        return self.total_parameters * self._precision_megabytes

    @property
    def total_flops(self) -> int:
        return int(self._flop_counter.get_total_flops())

    # -- the table -----------------------------------------------------------------------------------------
    def _columns(self) -> list[tuple[str, list[str]]]:
        """Every column but the shapes, each as (header, cells)."""
        flops = (sum(counts.values()) for counts in self.flop_counts.values())
        return [
            (" ", [str(i) for i in range(len(self._layer_summary))]),
            ("Name", self.layer_names),
            ("Type", self.layer_types),
            ("Params", [get_human_readable_count(n) for n in self.param_nums]),
            ("Mode", ["train" if training else "eval" for training in self.training_modes]),
            ("FLOPs", [get_human_readable_count(n) for n in flops]),
        ]

    def get_summary_data(self) -> list[tuple[str, list[str]]]:
        """The table's columns as (header, cells), with an 'other params' row for parameters that belong to no
        shown layer (set on the model itself): what the ``ModelSummary`` callbacks format."""
        columns = self._columns()
        if _example_input(self._model) is not None:
            columns.append(("In sizes", [str(size) for size in self.in_sizes]))
            columns.append(("Out sizes", [str(size) for size in self.out_sizes]))
        leftover = self.total_parameters - self.total_layer_params
        if leftover > 0:
            extra = {" ": " ", "Name": LEFTOVER_PARAMS_NAME, "Params": get_human_readable_count(leftover)}
            for header, cells in columns:
                cells.append(extra.get(header, NOT_APPLICABLE))
        return columns

    # callbacks written for Lightning call the method by this name
    _get_summary_data = get_summary_data

    def __str__(self) -> str:
        return format_summary_table(
            self.total_parameters, self.trainable_parameters, self.model_size, self.total_training_modes,
            self.total_flops, *self.get_summary_data(),
        )  # fmt: skip

    def __repr__(self) -> str:
        return str(self)


def format_summary_table(
    total_parameters: int,
    trainable_parameters: int,
    model_size: float,
    total_training_modes: dict[str, int],
    total_flops: int,
    *cols: tuple[str, list[str]],
) -> str:
    """The columns ``cols`` (header, cells) as a text table, followed by the totals, one per line."""
    rows = len(cols[0][1]) if cols else 0
    widths = [max([len(header), *(len(str(cell)) for cell in cells)]) for header, cells in cols]
    rule = "-" * (sum(widths) + 3 * (len(cols) + 1))

    def line(cells: Iterator[Any]) -> str:
        return " | ".join(f"{cell!s:<{width}}" for cell, width in zip(cells, widths))

    lines = [line(header for header, _ in cols), rule]
    lines += [line(cells[i] for _, cells in cols) for i in range(rows)]
    lines.append(rule)
    totals = [
        (get_human_readable_count(trainable_parameters), "Trainable params"),
        (get_human_readable_count(total_parameters - trainable_parameters), "Non-trainable params"),
        (get_human_readable_count(total_parameters), "Total params"),
        (get_formatted_model_size(model_size), "Total estimated model params size (MB)"),
        (total_training_modes["train"], "Modules in train mode"),
        (total_training_modes["eval"], "Modules in eval mode"),
        (get_human_readable_count(total_flops), "Total Flops"),
    ]
    lines += [f"{value:<10}{label}" for value, label in totals]
    return "\n".join(lines)


# programs written for Lightning import the formatter by this name
_format_summary_table = format_summary_table


def summarize(lightning_module: nn.Module, max_depth: int = 1) -> ModelSummary:
    """The :class:`ModelSummary` of ``lightning_module`` (any ``nn.Module``) down to ``max_depth`` levels."""
    return ModelSummary(lightning_module, max_depth=max_depth)


# -- the module's surroundings: read through public attributes, so any nn.Module can be summarized -----------
def _trainer_of(model: nn.Module) -> Any:
    """The trainer ``model`` is attached to, or None (a plain ``nn.Module`` has none)."""
    try:
        return getattr(model, "trainer", None)
    except RuntimeError:  # a LightningModule not attached to a trainer says so when asked
        return None


def _example_input(model: nn.Module) -> Any:
    return getattr(model, "example_input_array", None)


def _transfer_to_device(model: nn.Module, trainer: Any, batch: Any) -> Any:
    """The example input through the batch-transfer hooks a training batch goes through (the data module's, where
    it overrides them), onto the model's device."""
    device = getattr(model, "device", None)
    if not isinstance(device, torch.device):
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
    datamodule = getattr(trainer, "datamodule", None) if trainer is not None else None

    def owner(hook: str) -> Any:
        if datamodule is not None and hasattr(datamodule, hook) and is_overridden(hook, datamodule):
            return datamodule
        return model if hasattr(model, hook) else None

    before, transfer, after = (owner(h) for h in ("on_before_batch_transfer", "transfer_batch_to_device",
                                                  "on_after_batch_transfer"))  # fmt: skip
    if before is not None:
        batch = before.on_before_batch_transfer(batch, 0)
    batch = transfer.transfer_batch_to_device(batch, device, 0) if transfer is not None else move_data_to_device(
        batch, device
    )
    if after is not None:
        batch = after.on_after_batch_transfer(batch, 0)
    return batch

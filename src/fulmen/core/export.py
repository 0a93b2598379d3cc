"""``LightningModule``'s export: ``to_onnx``, ``to_torchscript``, ``to_tensorrt`` and the
``example_input_array`` they default to, and ``jit_tracing``, under which a module detached from a trainer can
be read attribute by attribute (as ``torch.jit`` does)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Generator
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from fulmen.core.hooks import DataHooks
from fulmen.core.mixins import DeviceDtypeModuleMixin
from fulmen.utilities.apply_func import apply_to_collection
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _TORCH_TRT_AVAILABLE
from fulmen.utilities.rank_zero import rank_zero_deprecation

_SCRIPTING = False  # torch.jit is reading every attribute of the module (see jit_tracing)


@contextmanager
def jit_tracing() -> Generator[None, None, None]:
    """While ``torch.jit`` (script, trace, TensorBoard's ``add_graph``) reads every attribute of a module,
    ``module.trainer`` is None instead of an error for a module not attached to a trainer."""
    global _SCRIPTING
    previous, _SCRIPTING = _SCRIPTING, True
    try:
        yield
    finally:
        _SCRIPTING = previous


def jit_scripting() -> bool:
    """Whether :func:`jit_tracing` is active (``LightningModule.trainer`` then gives None, not an error)."""
    return _SCRIPTING


class ExportMixin(DeviceDtypeModuleMixin, DataHooks):
    """``LightningModule``'s export methods (a base of it: they are found as ``LightningModule.to_onnx``).

    Derives from the module classes it reads (device, train/eval, the batch-transfer hooks); those stay after
    it in ``LightningModule``'s MRO, where they were.
    """

    if TYPE_CHECKING:  # set in LightningModule.__init__; annotated here for type checkers only (see there)
        _example_input_array: Any

    @property
    def example_input_array(self) -> Any:
        return self._example_input_array

    @example_input_array.setter
    def example_input_array(self, example: Any) -> None:
        self._example_input_array = example

    def _export_input(self, given: Any, method: str) -> Any:
        sample = given if given is not None else self.example_input_array
        if sample is None:
            raise ValueError(
                f"{method} needs an example input: pass it ({'input_sample' if method == 'to_onnx' else 'example_inputs'}=...) "
                "or set `self.example_input_array` in your module's __init__."
            )
        return apply_to_collection(sample, Tensor, lambda t: t.to(self.device))

    @torch.no_grad()
    def to_onnx(self, file_path: str | Path | Any = None, input_sample: Any = None, **kwargs: Any) -> Any:
        """Export to ONNX with ``torch.onnx.export`` (in eval mode, restored after). ``input_sample``
        defaults to ``example_input_array``; ``kwargs`` go to ``torch.onnx.export`` (``dynamo=``,
        ``dynamic_shapes=``, ``input_names=`` ...). Returns what the exporter returns (an ``ONNXProgram``
        from torch's dynamo exporter, the default in recent torch)."""
        sample = self._export_input(input_sample, "to_onnx")
        args = sample if isinstance(sample, tuple) else (sample,)
        was_training = self.training
        self.eval()
        try:
            return torch.onnx.export(self, args, file_path, **kwargs)
        finally:
            self.train(was_training)

    @torch.no_grad()
    def to_torchscript(
        self, file_path: str | Path | None = None, method: str | None = "script", example_inputs: Any = None,
        **kwargs: Any,
    ) -> Any:  # fmt: skip
        """A TorchScript module from ``torch.jit.script`` (``method="script"``) or ``torch.jit.trace``
        (``"trace"``, with ``example_inputs`` or ``example_input_array``), made in eval mode; saved with
        ``torch.jit.save`` when ``file_path`` is given. Deprecated, with Lightning's warning: TorchScript is
        deprecated in PyTorch (``to_onnx`` or ``torch.export.export`` instead)."""
        rank_zero_deprecation(
            "`LightningModule.to_torchscript` has been deprecated in v2.7 and will be removed in v2.8. "
            "TorchScript is deprecated in PyTorch. Use `torch.export.export()` for model exporting instead. "
            "See https://pytorch.org/docs/stable/export.html for more information."
        )
        if method not in ("script", "trace"):
            raise ValueError(
                f"to_torchscript(method={method!r}): choose 'script' (compile the code) or 'trace' (record one "
                "run on example inputs)."
            )
        sample = self._export_input(example_inputs, "to_torchscript") if method == "trace" else None
        was_training = self.training
        self.eval()
        try:
            with jit_tracing():
                if method == "script":
                    scripted = torch.jit.script(self, **kwargs)
                else:
                    scripted = torch.jit.trace(self, example_inputs=sample, **kwargs)
        finally:
            self.train(was_training)
        if file_path is not None:
            torch.jit.save(scripted, file_path)
        return scripted

    @torch.no_grad()
    def to_tensorrt(
        self,
        file_path: str | Path | BytesIO | None = None,
        input_sample: Any | None = None,
        ir: Literal["default", "dynamo", "ts"] = "default",
        output_format: Literal["exported_program", "torchscript"] = "exported_program",
        retrace: bool = False,
        default_device: str | torch.device = "cuda",
        **compile_kwargs: Any,
    ) -> Any:
        """Compile with ``torch_tensorrt.compile`` (in eval mode, on a CUDA device: ``default_device`` when the
        module is elsewhere; mode and device restored after) and return the compiled module; saved to
        ``file_path`` when given (``ir="ts"``: with ``torch.jit.save``, as ``output_format="torchscript"``).
        ``input_sample`` defaults to ``example_input_array`` and goes through the batch-transfer hooks;
        ``compile_kwargs`` go to ``torch_tensorrt.compile``.

        Raises:
            ModuleNotFoundError: ``torch_tensorrt`` is not installed.
            MisconfigurationException: neither the module nor ``default_device`` is on a CUDA device.
            ValueError: no input sample, or ``ir="ts"`` with another ``output_format``.
        """
        if not _TORCH_TRT_AVAILABLE:
            raise ModuleNotFoundError(f"`{type(self).__name__}.to_tensorrt` requires `torch_tensorrt` to be installed. ")
        mode, device = self.training, self.device
        if device.type != "cuda":
            target = torch.device(default_device) if isinstance(default_device, str) else default_device
            if not torch.cuda.is_available() or target.type != "cuda":
                raise MisconfigurationException(
                    f"TensorRT only supports CUDA devices. The current device is {device}."
                    " Please set the `default_device` argument to a CUDA device."
                )
            self.to(target)
        if input_sample is None:
            if self.example_input_array is None:
                raise ValueError(
                    "Could not export to TensorRT since neither `input_sample` nor"
                    " `model.example_input_array` attribute is set."
                )
            input_sample = self.example_input_array

        import torch_tensorrt

        sample = copy.deepcopy((input_sample,) if isinstance(input_sample, Tensor) else input_sample)
        sample = self.on_before_batch_transfer(sample, 0)
        sample = self.on_after_batch_transfer(self.transfer_batch_to_device(sample, self.device, 0), 0)
        with jit_tracing() if ir == "ts" else contextlib.nullcontext():
            compiled = torch_tensorrt.compile(module=self.eval(), ir=ir, inputs=sample, **compile_kwargs)
        self.train(mode)
        self.to(device)
        if file_path is not None:
            if ir == "ts":
                if output_format != "torchscript":
                    raise ValueError(
                        "TensorRT with IR mode 'ts' only supports output format 'torchscript'."
                        f" The current output format is {output_format}."
                    )
                torch.jit.save(compiled, file_path)
            else:
                torch_tensorrt.save(compiled, file_path, inputs=sample, output_format=output_format, retrace=retrace)
        return compiled

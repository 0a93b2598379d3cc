"""``measure_flops``: the floating-point operations of one forward (and backward) pass, counted by
``torch.utils.flop_counter`` (run it on the ``meta`` device to count without computing); ``get_available_flops``:
what a device can do per second at most, from its data sheet (the denominator of model FLOPs utilisation)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fulmen.utilities.rank_zero import rank_zero_warn


def measure_flops(model: torch.nn.Module, forward_fn: Callable[[], torch.Tensor],
                  loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None) -> int:  # fmt: skip
    """FLOPs of ``forward_fn()`` (and of the backward of ``loss_fn(output)`` when given) on ``model``."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        if loss_fn is None:
            forward_fn()
        else:
            loss_fn(forward_fn()).backward()
    return int(counter.get_total_flops())


# Peak TFLOP/s from NVIDIA's data sheets, in the order of _KINDS (None: the chip has no such unit), and of Google's
# TPU generations (bfloat16): the figures Lightning Fabric divides by, so that a model FLOPs utilisation reads the
# same. "tfloat32" is float32 matmuls on tensor cores (Ampere and later, when torch.get_float32_matmul_precision()
# is not "highest").
_KINDS = (torch.float64, torch.float32, "tfloat32", torch.bfloat16, torch.float16, torch.int8, "int4")
_GPU_TFLOPS: dict[str, tuple[float | None, ...]] = {
    "h200 sxm": (34, 67, 990, 2000, 2000, 4000, None),
    "h200 nvl": (30, 60, 840, 1700, 1700, 3300, None),
    "h100 nvl": (67, 133.8, 989.4, 1978.8, 1978.8, 3957.8, None),
    "h100 sxm": (33.5, 66.9, 494.7, 989.4, 989.4, 1978.9, None),
    "h100 pcie": (25.6, 51.2, 378, 756, 756, 1513, None),
    "rtx 4090": (None, 82.6, 82.6, 82.6, 82.6, 660.6, 1321.2),
    "rtx 4080": (None, 48.7, 48.7, 48.7, 48.7, 389.9, 779.8),
    "rtx 4080 super": (None, 52.2, 52.2, 52.2, 52.2, 417.6, 835.2),
    "l4": (None, 30.3, 60, 121, 121, 242, 484),
    "l40": (None, 90.5, 90.5, 181, 181, 362, 724),
    "a100": (9.7, 19.5, 156, 312, 312, 624, None),
    "a6000": (None, 38.7, 77.4, 38.7, 38.7, 309.7, 619.3),
    "a40": (None, 37.4, 74.8, 37.4, 37.4, 299.3, 598.7),
    "a10g": (None, 31.2, 62.5, 125, 125, 250, 500),
    "rtx 3090 ti": (None, 40, 40, 40, 40, 320, 640),
    "rtx 3090": (None, 35.6, 35.6, 35.6, 35.6, 284, 568),
    "rtx 3080 ti": (None, 34.1, 34.1, 34.1, 34.1, 272.8, 546.6),
    "rtx 3080": (None, 29.8, 29.8, 29.8, 29.8, 238, 476),
    "rtx 3070": (None, 20.3, 20.3, 20.3, 20.3, 162.6, 325.2),
    "t4": (None, 8.1, None, None, 65, 130, 260),
    "quadro rtx 5000": (None, 11.2, None, None, 89.2, None, None),
    "rtx 2080 super": (None, 11.2, None, None, 22.3, 178.4, 356.8),
    "rtx 2080 ti": (None, 14.2, None, None, 28.5, 227.7, 455.4),
    "rtx 2080": (None, 10.6, None, None, 21.2, 169.6, 339.1),
    "rtx 2070 super": (None, 9.1, None, None, 18.1, 145, 290),
    "titan rtx": (None, 16.3, None, None, 32.6, 261, 522),
    "v100 sxm": (7.8, 15.7, None, None, 125, None, None),
    "v100 pcie": (7, 14, None, None, 112, None, None),
    "v100s pcie": (8.2, 16.4, None, None, 130, None, None),
}  # fmt: skip
_TPU_TFLOPS = {"v2": 45, "v3": 123, "v4": 275, "v5litepod": 197}


def _gpu_chip(name: str) -> str:
    """The key of ``_GPU_TFLOPS`` for a CUDA device name (``"NVIDIA H100 80GB HBM3"`` -> ``"h100 sxm"``); the
    lower-cased name when no rule knows it."""
    chip = name.lower()
    words = chip.replace("-", " ").split()
    if "h200" in chip:
        return "h200 nvl" if "nvl" in chip else "h200 sxm"
    if "h100" in chip:
        for mark, key in (("hbm3", "h100 sxm"), ("nvl", "h100 nvl"), ("pcie", "h100 pcie"), ("hbm2e", "h100 pcie")):
            if mark in chip:
                return key
        return chip
    if "l4" in words:
        return "l4"
    if "l40" in words:
        return "l40"
    if "geforce" in words and "rtx" in words:
        number = words[words.index("rtx") + 1]
        suffix = " super" if "super" in words else " ti" if "ti" in words else ""
        return f"rtx {number}{suffix}"
    if "v100" in chip and ("sxm" in chip or "pcie" in chip):
        return f"{'v100s' if 'v100s' in chip else 'v100'} {'sxm' if 'sxm' in chip else 'pcie'}"
    for known in ("a6000", "a100", "a40", "a10g", "t4", "quadro rtx 5000", "titan rtx"):
        if known in chip:
            return known
    return chip


def get_available_flops(device: torch.device, dtype: torch.dtype | str) -> int | None:
    """The FLOP/s ``device`` can do at most in ``dtype`` (its data sheet's dense peak, what only large matmuls
    approach): a CUDA GPU fulmen knows, or a TPU; None, with a warning, for a GPU or dtype it does not know, and
    for other devices (Lightning Fabric's ``get_available_flops``)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        chip = _gpu_chip(name)
        if chip not in _GPU_TFLOPS:
            rank_zero_warn(f"FLOPs not found for {name!r} (read as {chip!r}): pass `available_flops` yourself.")
            return None
        ampere = torch.cuda.get_device_capability(device)[0] >= 8
        if dtype is torch.float32 and ampere and torch.get_float32_matmul_precision() != "highest":
            dtype = "tfloat32"  # float32 matmuls run on the tensor cores
        tflops = _GPU_TFLOPS[chip][_KINDS.index(dtype)] if dtype in _KINDS else None
        if tflops is None:
            rank_zero_warn(f"{name!r} does not support {dtype}: no FLOPs available.")
            return None
        return round(tflops * 1e12)
    if device.type == "xla":
        from torch_xla._internal import tpu

        env = tpu.get_tpu_env()
        generation = env.get("TYPE") or env["ACCELERATOR_TYPE"].split("-")[0]  # "V4" / "v4-8"
        if generation.lower() not in _TPU_TFLOPS:
            rank_zero_warn(f"FLOPs not found for TPU {generation!r} with {dtype}")
            return None
        return round(_TPU_TFLOPS[generation.lower()] * 1e12)
    return None


def _plugin_to_compute_dtype(plugin: Any) -> torch.dtype:
    """The dtype a precision plugin's matmuls compute in, the one to look FLOPs up for: float32 at full
    precision, the low dtype of mixed / half precision, float64 for double, int8 for TransformerEngine's FP8,
    the gradient-reduction dtype of FSDP (Lightning Fabric's ``_plugin_to_compute_dtype``). Each precision
    object answers for itself (``compute_dtype``)."""
    dtype = getattr(plugin, "compute_dtype", None)
    if not isinstance(dtype, torch.dtype):
        raise RuntimeError(f"Expected a precision plugin, got {plugin}")
    return dtype


__all__ = ["get_available_flops", "measure_flops"]

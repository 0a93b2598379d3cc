"""Why a test cannot run here: the conditions a ``RunIf(...)`` marker names, checked against this machine.

A test suite builds its marker from the answer, e.g.::

    def RunIf(**conditions):
        reasons, marker_kwargs = _runif_reasons(**conditions)
        return pytest.mark.skipif(bool(reasons), reason=f"Requires: [{' + '.join(reasons)}]")

Nothing here imports an optional package: availability is read from what is installed.
"""

from __future__ import annotations

import operator
import os
import sys

import torch

from fulmen.utilities.imports import (
    _OMEGACONF_AVAILABLE,
    _RICH_AVAILABLE,
    RequirementCache,
    compare_version,
    package_available,
    parse_version,
)


def _cuda_supports_bf16() -> bool:
    try:
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    except (AssertionError, RuntimeError):  # a torch built without CUDA; no driver
        return False


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def _dynamo_supported() -> bool:
    from torch._dynamo.eval_frame import is_dynamo_supported

    return bool(is_dynamo_supported())


def _runif_reasons(
    *,
    min_cuda_gpus: int = 0,
    min_torch: str | None = None,
    max_torch: str | None = None,
    min_python: str | None = None,
    bf16_cuda: bool = False,
    tpu: bool = False,
    mps: bool | None = None,
    skip_windows: bool = False,
    standalone: bool = False,
    deepspeed: bool = False,
    dynamo: bool = False,
    rich: bool = False,
    omegaconf: bool = False,
    psutil: bool = False,
    sklearn: bool = False,
    onnx: bool = False,
    linux_only: bool = False,
    onnxscript: bool = False,
    tensorrt: bool = False,
) -> tuple[list[str], dict[str, bool]]:
    """The reasons this machine does not meet the conditions (empty: the test can run), and the conditions a
    test collector acts on besides skipping (``min_cuda_gpus``, ``tpu``, ``standalone``: True when asked).

    Args:
        min_cuda_gpus: at least this many CUDA devices.
        min_torch: torch at least this version (a nightly counts as its release).
        max_torch: torch older than this version.
        min_python: Python at least this version.
        bf16_cuda: a CUDA device that computes in bfloat16.
        tpu: a TPU reachable through ``torch_xla``.
        mps: True: Apple's MPS is available; False: it is not.
        skip_windows: not on Windows.
        standalone: the test runs in a process of its own: only when ``PL_RUN_STANDALONE_TESTS=1``.
        deepspeed: DeepSpeed installed (with torch >= 2.4).
        dynamo: ``torch.compile``'s dynamo supports this platform.
        rich, omegaconf, psutil, sklearn, onnx, onnxscript, tensorrt: that package is installed.
        linux_only: on Linux.
    """
    reasons = [
        *_version_reasons(min_cuda_gpus, min_torch, max_torch, min_python),
        *_platform_reasons(bf16_cuda, skip_windows, tpu, mps, standalone, deepspeed, dynamo, linux_only),
    ]
    # (asked, available, the reason's name)
    packages = (
        (rich, _RICH_AVAILABLE, "Rich"),
        (omegaconf, _OMEGACONF_AVAILABLE, "omegaconf"),
        (psutil, RequirementCache("psutil"), "psutil"),
        (sklearn, RequirementCache("scikit-learn"), "scikit-learn"),
        (onnx, RequirementCache("onnx"), "onnx"),
        (onnxscript, RequirementCache("onnxscript"), "onnxscript"),
        (tensorrt, RequirementCache("torch_tensorrt"), "torch-tensorrt"),
    )
    reasons.extend(name for asked, available, name in packages if asked and not available)
    asked = {"min_cuda_gpus": bool(min_cuda_gpus), "tpu": tpu, "standalone": standalone}
    return reasons, {name: True for name, on in asked.items() if on}


def _version_reasons(min_cuda_gpus: int, min_torch: str | None, max_torch: str | None,
                     min_python: str | None) -> list[str]:  # fmt: skip
    """The GPU count and the torch / Python versions asked for, in the order their reasons are listed."""
    reasons = []
    if min_cuda_gpus and torch.cuda.device_count() < min_cuda_gpus:
        reasons.append(f"GPUs>={min_cuda_gpus}")
    if min_torch and compare_version("torch", operator.lt, min_torch, use_base_version=True):
        reasons.append(f"torch>={min_torch}, {torch.__version__} installed")
    if max_torch and compare_version("torch", operator.ge, max_torch, use_base_version=True):
        reasons.append(f"torch<{max_torch}, {torch.__version__} installed")
    if min_python:
        running = ".".join(str(n) for n in sys.version_info[:3])
        if parse_version(running) < parse_version(min_python):
            reasons.append(f"python>={min_python}")
    return reasons


def _platform_reasons(bf16_cuda: bool, skip_windows: bool, tpu: bool, mps: bool | None, standalone: bool,
                      deepspeed: bool, dynamo: bool, linux_only: bool) -> list[str]:  # fmt: skip
    """The device, platform and environment conditions, in the order their reasons are listed."""
    reasons = []
    if bf16_cuda and not _cuda_supports_bf16():
        reasons.append("CUDA device bf16")
    if skip_windows and sys.platform == "win32":
        reasons.append("unimplemented on Windows")
    if tpu and not package_available("torch_xla"):
        reasons.append("TPU")
    if mps is not None:
        if mps and not _mps_available():
            reasons.append("MPS")
        elif not mps and _mps_available():
            reasons.append("not MPS")
    if standalone and os.getenv("PL_RUN_STANDALONE_TESTS", "0") != "1":
        reasons.append("Standalone execution")
    if deepspeed and not (package_available("deepspeed") and compare_version("torch", operator.ge, "2.4.0")):
        reasons.append("Deepspeed")
    if dynamo and not _dynamo_supported():
        reasons.append("torch.dynamo")
    if linux_only and sys.platform != "linux":
        reasons.append("only linux")
    return reasons

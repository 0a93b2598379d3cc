"""The torch-global settings a run's flags ask for (``torch_settings``), held for the run and put back after it.

:meth:`fulmen.trainer.runner.StageRunner.run` holds them around each stage; ``fulmen.trainer.runner`` re-exports
the function.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from fulmen.accelerators import cuda as _cuda

if TYPE_CHECKING:
    from fulmen.trainer.flags import TrainerConfig


@contextlib.contextmanager
def torch_settings(config: TrainerConfig, device: torch.device) -> Iterator[None]:
    """The torch-global settings a run's flags ask for, put back as they were when the run ends.

    ``matmul_precision``, ``deterministic`` (with cuBLAS's workspace variable), ``benchmark`` and
    ``detect_anomaly`` all change process-wide state that outlives the Trainer otherwise.
    """
    saved = (
        torch.get_float32_matmul_precision(), torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(), torch.backends.cudnn.benchmark,
        torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled(), os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    )  # fmt: skip
    if config.matmul_precision is not None:
        torch.set_float32_matmul_precision(config.matmul_precision)
    else:
        _cuda._check_cuda_matmul_precision(device)  # the module's name, read now (Lightning's tests patch it)
    deterministic = config.deterministic
    if deterministic is not None:
        torch.use_deterministic_algorithms(bool(deterministic), warn_only=deterministic == "warn")
        if deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if config.benchmark is not None or deterministic:
        torch.backends.cudnn.benchmark = bool(config.benchmark) and not deterministic
    torch.autograd.set_detect_anomaly(config.detect_anomaly)
    try:
        yield
    finally:
        matmul, det, warn_only, benchmark, anomaly, check_nan, workspace = saved
        torch.set_float32_matmul_precision(matmul)
        torch.use_deterministic_algorithms(det, warn_only=warn_only)
        torch.backends.cudnn.benchmark = benchmark
        torch.autograd.set_detect_anomaly(anomaly, check_nan=check_nan)
        if workspace is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = workspace

"""NVIDIA GPUs through CUDA: device indices, their statistics, and finding the free ones."""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from fulmen.accelerators.accelerator import Accelerator, _as_count, _as_indices, _Name
from fulmen.utilities.exceptions import InvalidTypeError, MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_info

_log = logging.getLogger(__name__)


class CUDAAccelerator(Accelerator):
    """NVIDIA GPUs. ``devices``: a number of GPUs (the first ones), -1 or ``"auto"`` for all, or indices such as
    ``[0, 2]``, ``"0,2"`` or ``"1,"``."""

    name = _Name("cuda")

    def setup_device(self, device: torch.device) -> None:
        if device.type != "cuda":
            raise MisconfigurationException(
                f"CUDAAccelerator was given device {device}: it computes on 'cuda' devices only. Use the "
                f"accelerator of that device (e.g. Trainer(accelerator={device.type!r}))."
            )
        torch.cuda.set_device(device)

    def setup(self, trainer: Any) -> None:
        self.set_nvidia_flags(getattr(trainer, "local_rank", 0))
        _clear_cuda_memory()

    @staticmethod
    def set_nvidia_flags(local_rank: int) -> None:
        """Number the devices in the PCI bus order nvidia-smi shows (``CUDA_DEVICE_ORDER=PCI_BUS_ID``), whatever
        CUDA's own ordering, and log which devices this local rank sees."""
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        devices = os.getenv("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(num_cuda_devices())))
        _log.info(f"LOCAL_RANK: {local_rank} - CUDA_VISIBLE_DEVICES: [{devices}]")

    def teardown(self) -> None:
        _clear_cuda_memory()

    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        """The CUDA caching allocator's statistics (``torch.cuda.memory_stats``): no device synchronisation."""
        return dict(torch.cuda.memory_stats(device))

    @staticmethod
    def parse_devices(devices: int | str | list[int]) -> list[int] | None:
        """The GPU indices ``devices`` selects (``None`` for 0 or an empty list: no GPU), checked against the
        GPUs this machine has."""
        if isinstance(devices, bool):
            raise InvalidTypeError(f"devices={devices!r} must be an int, a list of ints or a string such as '0,1'.")
        if devices in (0, "0") or (isinstance(devices, (list, tuple)) and len(devices) == 0):
            return None
        available = num_cuda_devices()
        count = _as_count(devices)
        if count == -1:
            return list(range(available))
        if count is not None:
            if count > available:
                raise MisconfigurationException(
                    f"devices={devices!r} asks for {count} CUDA devices, but this machine has {available}. Use "
                    f"devices={available} (or -1 for all), or name them by index, e.g. devices=[0]."
                )
            return list(range(count))
        indices = _as_indices(devices)
        bad = [i for i in indices if not 0 <= i < available]
        if bad or len(set(indices)) != len(indices):
            problem = f"names CUDA devices {bad} that do not exist" if bad else "names a device twice"
            raise MisconfigurationException(
                f"devices={devices!r} {problem}: this machine has {available} (indices 0..{available - 1}). "
                "Give distinct indices of existing devices."
            )
        return indices

    @staticmethod
    def get_parallel_devices(devices: list[int]) -> list[torch.device]:
        return [torch.device("cuda", i) for i in devices]

    @staticmethod
    def auto_device_count() -> int:
        return num_cuda_devices()

    @staticmethod
    def is_available() -> bool:
        return num_cuda_devices() > 0


def _clear_cuda_memory() -> None:
    """Give the memory torch's caching allocator (and cuBLAS's workspaces) hold back to the driver (called as
    this module's name when a run sets up and tears down, so a test can patch it)."""
    if not torch.cuda.is_initialized():
        return
    clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear_workspaces is not None:
        clear_workspaces()
    torch.cuda.empty_cache()


_NVIDIA_SMI_FIELDS = (
    ("utilization.gpu", "%"), ("memory.used", "MB"), ("memory.free", "MB"), ("utilization.memory", "%"),
    ("fan.speed", "%"), ("temperature.gpu", "°C"), ("temperature.memory", "°C"),
)  # fmt: skip


def get_nvidia_gpu_stats(device: torch.device | str | int) -> dict[str, float]:
    """Utilisation, memory, fan speed and temperatures of one GPU as ``nvidia-smi`` reports them, keyed
    ``"<field> (<unit>)"``; a field the GPU does not report (``[N/A]``) reads 0.0.

    Raises:
        FileNotFoundError: ``nvidia-smi`` is not on the ``PATH``.
    """
    import shutil
    import subprocess

    executable = shutil.which("nvidia-smi")
    if executable is None:
        raise FileNotFoundError(
            "nvidia-smi: command not found. get_nvidia_gpu_stats reads the GPU's statistics from it: install the "
            "NVIDIA driver's utilities, or use CUDAAccelerator().get_device_stats(device) (torch's allocator "
            "statistics) instead."
        )
    index = device if isinstance(device, int) else torch.device(device).index
    if index is None:  # "cuda": the current device
        index = torch.cuda.current_device()
    query = ",".join(field for field, _ in _NVIDIA_SMI_FIELDS)
    completed = subprocess.run(
        [executable, f"--query-gpu={query}", "--format=csv,nounits,noheader", f"--id={_physical_gpu_id(index)}"],
        capture_output=True, encoding="utf-8", check=True,
    )  # fmt: skip
    values = [_number(value) for value in completed.stdout.strip().split(", ")]
    return {f"{field} ({unit})": value for (field, unit), value in zip(_NVIDIA_SMI_FIELDS, values)}


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return 0.0


def _physical_gpu_id(index: int) -> str:
    """The id nvidia-smi knows GPU ``index`` by: ``CUDA_VISIBLE_DEVICES`` renumbers the GPUs torch sees."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return str(index)
    return visible.split(",")[index].strip()


_matmul_suggested = False


def _check_cuda_matmul_precision(device: torch.device) -> None:
    """Once per process, as Lightning does: a CUDA GPU with tensor cores left at float32 'highest' matmul
    precision runs float32 matmuls several times slower than it could. A run without
    ``Trainer(matmul_precision=...)`` calls it as this module's name when it starts (a test can patch it)."""
    global _matmul_suggested
    if _matmul_suggested or device.type != "cuda" or torch.get_float32_matmul_precision() != "highest":
        return
    if torch.cuda.get_device_capability(device) < (7, 0):  # no tensor cores before Volta
        return
    _matmul_suggested = True
    rank_zero_info(
        f"The CUDA device {torch.cuda.get_device_name(device)!r} has tensor cores, and float32 matmuls run at "
        "'highest' precision. Trainer(matmul_precision='high') (or 'medium') trades a little precision for "
        "much faster float32 matmuls; pass matmul_precision='highest' to keep the current setting and "
        "silence this message."
    )


def num_cuda_devices() -> int:
    """The CUDA devices torch sees (after ``CUDA_VISIBLE_DEVICES``), counted without initialising CUDA. Every
    count in this module goes through it, so a test can stand in a machine's GPUs by replacing it (as test
    suites written for Lightning do with ``monkeypatch.setattr(cuda_module, "num_cuda_devices", ...)``)."""
    return torch.cuda.device_count()


def is_cuda_available() -> bool:
    """Whether torch sees a CUDA device, answered without initialising CUDA (so a process may still fork)."""
    return num_cuda_devices() > 0


def find_usable_cuda_devices(num_devices: int = -1) -> list[int]:
    """Indices of ``num_devices`` GPUs that accept a tensor now (-1: all that do), for
    ``Trainer(devices=find_usable_cuda_devices(2))`` on machines whose GPUs other jobs may occupy (a GPU in
    exclusive mode refuses a second process).

    Raises:
        ValueError: the machine has no visible GPU, or fewer than ``num_devices``.
        RuntimeError: fewer than ``num_devices`` of them are free.
    """
    if num_devices == 0:
        return []
    visible = list(range(num_cuda_devices()))
    if not visible:
        raise ValueError(
            f"find_usable_cuda_devices({num_devices}): this machine has no visible CUDA device (check the driver "
            "and CUDA_VISIBLE_DEVICES), so none can be used."
        )
    if num_devices > len(visible):
        raise ValueError(
            f"find_usable_cuda_devices({num_devices}) asks for more GPUs than the {len(visible)} this machine has."
        )
    usable: list[int] = []
    occupied: list[int] = []
    for index in visible:
        try:
            torch.tensor(0, device=torch.device("cuda", index))
        except RuntimeError:  # busy in exclusive mode, or out of memory
            occupied.append(index)
            continue
        usable.append(index)
        if len(usable) == num_devices:
            break
    if num_devices != -1 and len(usable) != num_devices:
        raise RuntimeError(
            f"find_usable_cuda_devices({num_devices}) found only {len(usable)} free GPU(s): {occupied} are occupied "
            "by other processes. Ask for fewer, or wait until they are free."
        )
    return usable

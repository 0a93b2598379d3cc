"""Which hardware runs the model: detection, device lists and their validation."""

from __future__ import annotations

from typing import Any

import torch

from fulmen.utilities.exceptions import MisconfigurationException

_ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu", "hpu")


class Accelerator:
    name = "base"

    @staticmethod
    def is_available() -> bool:
        return False

    @staticmethod
    def auto_device_count() -> int:
        return 1

    def parse_devices(self, devices: Any) -> list[torch.device]:
        raise NotImplementedError

    def setup_device(self, device: torch.device) -> None:
        pass

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class CPUAccelerator(Accelerator):
    name = "cpu"

    @staticmethod
    def is_available() -> bool:
        return True

    def parse_devices(self, devices: Any) -> list[torch.device]:
        count = _device_count(devices, available=1, name="cpu", allow_indices=False)
        return [torch.device("cpu")] * count


class CUDAAccelerator(Accelerator):
    name = "cuda"

    @staticmethod
    def is_available() -> bool:
        return torch.cuda.is_available()

    @staticmethod
    def auto_device_count() -> int:
        return torch.cuda.device_count()

    def parse_devices(self, devices: Any) -> list[torch.device]:
        available = torch.cuda.device_count()
        if isinstance(devices, (list, tuple)) or (isinstance(devices, str) and "," in devices):
            indices = _index_list(devices)
            bad = [i for i in indices if i < 0 or i >= available]
            if bad:
                raise MisconfigurationException(
                    f"devices={devices!r} names CUDA devices {bad}, but this machine has {available} "
                    f"(indices 0..{available - 1})."
                )
            return [torch.device("cuda", i) for i in indices]
        count = _device_count(devices, available=available, name="cuda", allow_indices=True)
        return [torch.device("cuda", i) for i in range(count)]

    def setup_device(self, device: torch.device) -> None:
        torch.cuda.set_device(device)


class MPSAccelerator(Accelerator):
    name = "mps"

    @staticmethod
    def is_available() -> bool:
        mps = getattr(torch.backends, "mps", None)
        return bool(mps is not None and mps.is_available())

    def parse_devices(self, devices: Any) -> list[torch.device]:
        count = _device_count(devices, available=1, name="mps", allow_indices=False)
        return [torch.device("mps", 0)] * count


def _index_list(devices: Any) -> list[int]:
    if isinstance(devices, str):
        return [int(x) for x in devices.split(",") if x.strip()]
    return [int(x) for x in devices]


def _device_count(devices: Any, available: int, name: str, allow_indices: bool) -> int:
    """Number of devices asked for; 'auto' means all that exist (1 for CPU and MPS)."""
    if devices == "auto":
        return max(1, available) if name != "cpu" else 1
    if isinstance(devices, str):
        text = devices.strip()
        try:
            devices = int(text)
        except ValueError:
            raise MisconfigurationException(
                f"devices={devices!r} is not understood. Use an int, -1 (all), 'auto', a list of indices "
                "or a comma-separated string like '0,1'."
            ) from None
    if isinstance(devices, (list, tuple)):
        if not allow_indices and name != "cpu":
            return len(devices)
        return len(devices)
    if isinstance(devices, bool) or not isinstance(devices, int):
        raise MisconfigurationException(
            f"devices={devices!r} must be an int, a list of ints, a string or 'auto'."
        )
    if devices == -1:
        return max(1, available)
    if devices <= 0:
        raise MisconfigurationException(
            f"devices={devices!r} is not valid: use a positive number of devices, -1 for all, or 'auto'."
        )
    if name != "cpu" and devices > available:
        raise MisconfigurationException(
            f"devices={devices!r} asks for {devices} {name.upper()} devices, but {available} are available."
        )
    return devices


def select_accelerator(accelerator: str | Accelerator) -> Accelerator:
    """Resolve the ``accelerator`` flag; ``'gpu'`` means CUDA or MPS, whichever this machine has."""
    if isinstance(accelerator, Accelerator):
        return accelerator
    if not isinstance(accelerator, str) or accelerator.lower() not in _ACCELERATORS:
        raise MisconfigurationException(
            f"accelerator={accelerator!r} is not supported. Use one of {list(_ACCELERATORS)} "
            "or an Accelerator instance."
        )
    name = accelerator.lower()
    if name == "auto":
        if CUDAAccelerator.is_available():
            return CUDAAccelerator()
        if MPSAccelerator.is_available():
            return MPSAccelerator()
        return CPUAccelerator()
    if name == "cpu":
        return CPUAccelerator()
    if name == "gpu":
        if CUDAAccelerator.is_available():
            return CUDAAccelerator()
        if MPSAccelerator.is_available():
            return MPSAccelerator()
        raise MisconfigurationException(
            "accelerator='gpu' was requested, but neither CUDA nor MPS is available on this machine. "
            "Use accelerator='cpu' (or 'auto' to pick whatever exists)."
        )
    if name == "cuda":
        if not CUDAAccelerator.is_available():
            raise MisconfigurationException(
                "accelerator='cuda' was requested, but torch.cuda.is_available() is False. Install a CUDA "
                "build of torch on a machine with an NVIDIA GPU, or use accelerator='cpu'."
            )
        return CUDAAccelerator()
    if name == "mps":
        if not MPSAccelerator.is_available():
            raise MisconfigurationException(
                "accelerator='mps' was requested, but MPS (Apple silicon) is not available here. "
                "Use accelerator='cpu'."
            )
        return MPSAccelerator()
    package = "torch_xla" if name == "tpu" else "habana_frameworks"
    raise MisconfigurationException(
        f"accelerator={accelerator!r} needs the `{package}` package, which is not installed here. "
        f"Install it on a machine with that hardware, or use accelerator='cpu' / 'gpu'."
    )

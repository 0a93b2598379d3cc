"""Which hardware runs the model: detection, device lists and their validation."""

from __future__ import annotations

from typing import Any

import torch

from fulmen.utilities.exceptions import InvalidTypeError, InvalidValueError, MisconfigurationException

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

    def get_device_stats(self, device: torch.device | str) -> dict[str, Any]:
        """Device statistics for ``DeviceStatsMonitor`` (the host's CPU and memory by default)."""
        return get_cpu_stats()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def get_cpu_stats() -> dict[str, float]:
    """CPU and memory use of the machine (``psutil``, imported here only)."""
    from fulmen.utilities.imports import require

    require("psutil", "psutil", "CPU statistics")
    import psutil
    return {
        "cpu_vm_percent": psutil.virtual_memory().percent,
        "cpu_percent": psutil.cpu_percent(),
        "cpu_swap_percent": psutil.swap_memory().percent,
    }


class CPUAccelerator(Accelerator):
    name = "cpu"

    @staticmethod
    def is_available() -> bool:
        return True

    def parse_devices(self, devices: Any) -> list[torch.device]:
        """On CPUs, ``devices`` is a number of processes (``'auto'``: one)."""
        if devices == "auto":
            return [torch.device("cpu")]
        count = _as_count(devices)
        if count is None or count == -1:
            raise MisconfigurationException(
                f"devices={devices!r} with accelerator='cpu': on CPUs devices is the number of processes to train "
                "in (one per device under DDP), e.g. devices=2, or 'auto' (one). CPUs have no device indices, and "
                "-1 ('all devices') does not say how many processes to start."
            )
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
        """A number of GPUs (the first ones), -1 / ``'auto'`` for all, or indices: ``[0, 2]``, ``'0,2'``, ``'1,'``."""
        available = torch.cuda.device_count()
        if devices == "auto":
            return [torch.device("cuda", i) for i in range(max(1, available))]
        count = _as_count(devices)
        if count == -1:
            return [torch.device("cuda", i) for i in range(available)]
        if count is not None:
            if count > available:
                raise MisconfigurationException(
                    f"devices={devices!r} asks for {count} CUDA devices, but this machine has {available}. Use "
                    f"devices={available} (or -1 for all), or name them by index, e.g. devices=[0]."
                )
            return [torch.device("cuda", i) for i in range(count)]
        indices = _as_indices(devices)
        bad = [i for i in indices if not 0 <= i < available]
        if bad or len(set(indices)) != len(indices):
            problem = f"names CUDA devices {bad} that do not exist" if bad else "names a device twice"
            raise MisconfigurationException(
                f"devices={devices!r} {problem}: this machine has {available} (indices 0..{available - 1}). "
                "Give distinct indices of existing devices."
            )
        return [torch.device("cuda", i) for i in indices]

    def setup_device(self, device: torch.device) -> None:
        torch.cuda.set_device(device)

    def get_device_stats(self, device: torch.device | str) -> dict[str, Any]:
        """The CUDA caching allocator's statistics (``torch.cuda.memory_stats``)."""
        return dict(torch.cuda.memory_stats(device))


class MPSAccelerator(Accelerator):
    name = "mps"

    @staticmethod
    def is_available() -> bool:
        mps = getattr(torch.backends, "mps", None)
        return bool(mps is not None and mps.is_available())

    def parse_devices(self, devices: Any) -> list[torch.device]:
        if devices in ("auto", 1, -1, "1", "-1", [0], (0,), "0,"):
            return [torch.device("mps", 0)]
        raise MisconfigurationException(
            f"devices={devices!r} with accelerator='mps': Apple silicon has one MPS device. Use devices=1 or 'auto'."
        )


def _as_count(devices: Any) -> int | None:
    """``devices`` as a number of devices (-1: all), or ``None`` when it lists indices."""
    if isinstance(devices, (list, tuple)) or (isinstance(devices, str) and "," in devices):
        return None
    if isinstance(devices, str):
        try:
            devices = int(devices.strip())
        except ValueError:
            raise InvalidTypeError(
                f"devices={devices!r} is not understood. Use a number of devices, -1 (all), 'auto', a list of "
                "indices or a comma-separated string of indices like '0,1'."
            ) from None
    if isinstance(devices, bool) or not isinstance(devices, int):
        raise InvalidTypeError(
            f"devices={devices!r} must be an int, a list of ints, a string such as '2' or '0,1', or 'auto'."
        )
    if devices == 0 or devices < -1:
        raise InvalidTypeError(
            f"devices={devices!r} is not valid: use a positive number of devices, -1 for all, or 'auto'."
        )
    return devices


def _as_indices(devices: Any) -> list[int]:
    try:
        items = devices.split(",") if isinstance(devices, str) else list(devices)
        indices = [int(x) for x in items if not isinstance(x, str) or x.strip()]
    except (TypeError, ValueError):
        indices = []
    if not indices or any(isinstance(x, bool) for x in devices):
        raise MisconfigurationException(
            f"devices={devices!r} is not a list of device indices: use e.g. [0, 1] or '0,1'."
        )
    return indices


def select_accelerator(accelerator: str | Accelerator) -> Accelerator:
    """Resolve the ``accelerator`` flag; ``'gpu'`` means CUDA or MPS, whichever this machine has."""
    if isinstance(accelerator, Accelerator):
        return accelerator
    if not isinstance(accelerator, str) or accelerator.lower() not in _ACCELERATORS:
        raise InvalidValueError(
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
    plugin = XLAAccelerator if name == "tpu" else HPUAccelerator
    if not plugin.is_available():
        raise MisconfigurationException(
            f"accelerator={accelerator!r} needs the `{plugin.package}` package ({plugin.install}), which is not "
            "installed here. Install it on a machine with that hardware, or use accelerator='cpu' / 'gpu'."
        )
    return plugin()


class _OneDeviceAccelerator(Accelerator):
    """Hardware reached through a vendor package that fulmen drives on one device only (TPU, Gaudi HPU):
    the vendors' multi-device launchers are not wired in."""

    package = ""
    install = ""

    @classmethod
    def is_available(cls) -> bool:
        import importlib.util

        return importlib.util.find_spec(cls.package) is not None

    def device(self) -> torch.device:
        raise NotImplementedError

    def parse_devices(self, devices: Any) -> list[torch.device]:
        if devices in ("auto", 1, "1"):
            return [self.device()]
        raise MisconfigurationException(
            f"devices={devices!r} with accelerator={self.name!r}: fulmen trains on one {self.name.upper()} device "
            "(devices=1); several need the vendor's own launcher, which fulmen does not drive."
        )


class XLAAccelerator(_OneDeviceAccelerator):
    name = "tpu"
    package = "torch_xla"
    install = "pip install torch_xla, matching your torch version"

    def device(self) -> torch.device:
        import torch_xla.core.xla_model as xm

        return torch.device(xm.xla_device())


class HPUAccelerator(_OneDeviceAccelerator):
    name = "hpu"
    package = "habana_frameworks"
    install = "Intel Gaudi's software stack, which provides habana_frameworks.torch"

    def device(self) -> torch.device:
        import habana_frameworks.torch  # noqa: F401  (registers the 'hpu' device with torch)

        return torch.device("hpu")

"""Apple silicon GPUs through Metal (MPS): one device per machine."""

from __future__ import annotations

import platform
from typing import Any

import torch

from fulmen.accelerators.accelerator import Accelerator, _Name
from fulmen.accelerators.cpu import host_stats
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import _PSUTIL_AVAILABLE as _PSUTIL_AVAILABLE


class MPSAccelerator(Accelerator):
    """The GPU of an Apple silicon Mac (``devices``: 1, ``"auto"``, ``[0]`` or ``"0,"``)."""

    name = _Name("mps")

    def setup_device(self, device: torch.device) -> None:
        if device.type != "mps":
            raise MisconfigurationException(
                f"MPSAccelerator was given device {device}: it computes on 'mps' only. Use the accelerator of "
                f"that device (e.g. Trainer(accelerator={device.type!r}))."
            )

    def teardown(self) -> None:
        pass

    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        """The Mac's CPU and memory use (its GPU shares the memory), from ``psutil``."""
        return get_device_stats()

    @staticmethod
    def parse_devices(devices: int | str | list[int]) -> list[int] | None:
        """``[0]`` for the one MPS device (``None`` for 0: none), refused where this machine has no MPS."""
        if devices in (0, "0") or (isinstance(devices, (list, tuple)) and len(devices) == 0):
            return None
        if not MPSAccelerator.is_available():
            raise MisconfigurationException(
                f"devices={devices!r} with accelerator='mps': this machine has no MPS device (Apple silicon with "
                "a torch build for it). Use accelerator='cpu', or 'auto' to take what exists."
            )
        if devices in ("auto", 1, -1, "1", "-1", [0], (0,), "0,"):
            return [0]
        raise MisconfigurationException(
            f"devices={devices!r} with accelerator='mps': Apple silicon has one MPS device. Use devices=1 or 'auto'."
        )

    @staticmethod
    def get_parallel_devices(devices: int | str | list[int]) -> list[torch.device]:
        parsed = MPSAccelerator.parse_devices(devices)
        return [torch.device("mps", i) for i in range(len(parsed or []))]

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        mps = getattr(torch.backends, "mps", None)
        return bool(mps is not None and mps.is_available() and platform.processor() in ("arm", "arm64"))


def get_device_stats() -> dict[str, float]:
    """CPU and memory use of an Apple silicon Mac, in percent (``psutil``, imported here only)."""
    return host_stats("M1", "MPS device statistics", _PSUTIL_AVAILABLE)

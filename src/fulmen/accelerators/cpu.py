"""CPUs: ``devices`` is a number of processes, each training on the host's CPU."""

from __future__ import annotations

from typing import Any

import torch

from fulmen.accelerators.accelerator import Accelerator, _as_count, _Name
from fulmen.utilities.exceptions import InvalidTypeError, MisconfigurationException
from fulmen.utilities.imports import _PSUTIL_AVAILABLE as _PSUTIL_AVAILABLE
from fulmen.utilities.imports import RequirementCache as RequirementCache


class CPUAccelerator(Accelerator):
    """The host's CPU; ``Trainer(devices=n)`` runs ``n`` processes on it (one under the default strategy)."""

    name = _Name("cpu")

    def setup_device(self, device: torch.device) -> None:
        if device.type != "cpu":
            raise MisconfigurationException(
                f"CPUAccelerator was given device {device}: it computes on 'cpu' only. Use the accelerator of "
                f"that device (e.g. Trainer(accelerator={device.type!r}))."
            )

    def teardown(self) -> None:
        pass

    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        """CPU and memory use of the host (``psutil``)."""
        return get_cpu_stats()

    @staticmethod
    def parse_devices(devices: int | str) -> int:
        """The number of processes ``devices`` asks for: a positive int, or a string holding one."""
        count = _as_count(devices)
        if count is None:
            raise InvalidTypeError(
                f"devices={devices!r} with accelerator='cpu': on CPUs devices is the number of processes to "
                "train in (one per device under DDP), e.g. devices=2. CPUs have no device indices."
            )
        if count == -1:
            raise InvalidTypeError(
                f"devices={devices!r} with accelerator='cpu': -1 ('all devices') does not say how many processes "
                "to start on CPUs. Give the number of processes, e.g. devices=2, or 'auto' (one)."
            )
        return count

    @staticmethod
    def get_parallel_devices(devices: int | str) -> list[torch.device]:
        return [torch.device("cpu")] * CPUAccelerator.parse_devices(devices)

    @staticmethod
    def auto_device_count() -> int:
        return 1

    @staticmethod
    def is_available() -> bool:
        return True


def get_cpu_stats() -> dict[str, float]:
    """CPU and memory use of the machine, in percent (``psutil``, imported here only)."""
    return host_stats("cpu", "CPU statistics", _PSUTIL_AVAILABLE)


def host_stats(prefix: str, component: str, available: object) -> dict[str, float]:
    """Memory, CPU and swap use of the host in percent, keyed ``<prefix>_vm_percent``, ``<prefix>_percent``
    and ``<prefix>_swap_percent``; ``psutil`` is imported here only (a missing one is named, for ``component``).
    ``available``: the caller's module's ``_PSUTIL_AVAILABLE``, read when it calls (a patched flag counts)."""
    from fulmen.utilities.imports import require

    require("psutil", "psutil", component, available=available)
    import psutil

    return {
        f"{prefix}_vm_percent": psutil.virtual_memory().percent,
        f"{prefix}_percent": psutil.cpu_percent(),
        f"{prefix}_swap_percent": psutil.swap_memory().percent,
    }

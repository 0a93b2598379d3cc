"""Intel Gaudi (HPU) through ``habana_frameworks``: one device, under the single-device strategy."""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from fulmen.accelerators.accelerator import Accelerator, _Name
from fulmen.utilities.exceptions import MisconfigurationException


class HPUAccelerator(Accelerator):
    """One Gaudi device (``accelerator="hpu"``); Gaudi's multi-device launcher is not driven by fulmen."""

    name = _Name("hpu")
    package = "habana_frameworks"
    install = "Intel Gaudi's software stack, which provides habana_frameworks.torch"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Lightning 2.6.6 keeps this name for a class it removed, taking any arguments (and raising); fulmen's
        # trains on one Gaudi device (see fulmen._graveyard) and, as the other accelerators, takes none
        super().__init__(*args, **kwargs)

    def setup_device(self, device: torch.device) -> None:
        pass

    def teardown(self) -> None:
        pass

    @staticmethod
    def parse_devices(devices: Any) -> int:
        if devices in ("auto", 1, "1"):
            return 1
        raise MisconfigurationException(
            f"devices={devices!r} with accelerator='hpu': fulmen trains on one HPU device (devices=1); several "
            "need the vendor's own launcher, which fulmen does not drive."
        )

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        HPUAccelerator.parse_devices(devices)
        import habana_frameworks.torch  # noqa: F401  (registers the 'hpu' device with torch)

        return [torch.device("hpu")]

    @staticmethod
    def auto_device_count() -> int:
        return 1 if HPUAccelerator.is_available() else 0

    @staticmethod
    def is_available() -> bool:
        return importlib.util.find_spec(HPUAccelerator.package) is not None

"""Google TPUs (and other XLA devices) through ``torch_xla``.

fulmen trains on one XLA device (``devices=1``): the device ``torch_xla`` gives, under the single-device
strategy. XLA's own multi-process launcher (``devices=8`` on a TPU host) is not driven by fulmen.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from fulmen.accelerators.accelerator import Accelerator, MissingPackageError, _Name
from fulmen.utilities.exceptions import MisconfigurationException


def xla_installed() -> bool:
    return importlib.util.find_spec("torch_xla") is not None


def require_xla(component: str, available: object = None) -> None:
    """Raise :class:`MissingPackageError` (a ``ModuleNotFoundError``) naming what to install or use instead.
    ``available``: the ``_XLA_AVAILABLE`` flag of the caller's module, read by the caller when it runs, which
    then decides instead of a look-up (a patched flag counts, as in Lightning)."""
    if not (xla_installed() if available is None else available):
        raise MissingPackageError(
            f"{component} needs the `torch_xla` package, which is not installed: on a TPU host run "
            "`pip install torch_xla` (matching your torch version). On this machine use accelerator='cpu' or "
            "'gpu' instead.",
            name="torch_xla",
        )


class XLAAccelerator(Accelerator):
    """XLA devices (TPUs); constructing one needs ``torch_xla``."""

    name = _Name("tpu")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        require_xla("XLAAccelerator (accelerator='tpu')")
        super().__init__(*args, **kwargs)

    def setup_device(self, device: torch.device) -> None:
        pass

    def teardown(self) -> None:
        pass

    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        """Free and used memory of the XLA device, as ``torch_xla`` reports it."""
        import torch_xla.core.xla_model as xm

        info = xm.get_memory_info(device)
        if "kb_free" in info:  # older torch_xla: kilobytes free of a total
            free, used = info["kb_free"], info["kb_total"] - info["kb_free"]
        else:  # newer torch_xla: bytes used of a limit
            free, used = info["bytes_limit"] - info["bytes_used"], info["bytes_used"]
        return {"avg. free memory (MB)": free, "avg. peak memory (MB)": used}

    @staticmethod
    def parse_devices(devices: int | str | list[int]) -> int | list[int]:
        """A number of XLA devices (1 or all of them) or a one-element list naming one device."""
        if isinstance(devices, bool) or not isinstance(devices, (int, str, list, tuple)):
            raise TypeError(
                f"devices={devices!r} for XLA devices must be an int, a string such as '1' or '8', or a list "
                "holding one device index."
            )
        parsed: Any = devices
        if isinstance(devices, str):
            text = devices.strip()
            try:
                parsed = int(text)
            except ValueError:
                try:
                    parsed = [int(part) for part in text.split(",") if part.strip()]
                except ValueError:
                    raise ValueError(f"devices={devices!r} is not a number of XLA devices nor a list of them.") from None
        count = XLAAccelerator.auto_device_count()
        one_listed = isinstance(parsed, (list, tuple)) and len(parsed) == 1 and 0 <= parsed[0] < count
        if not (isinstance(parsed, int) and parsed in (1, count)) and not one_listed:
            raise ValueError(
                f"devices={devices!r} for XLA devices: use 'auto', 1, {count} (all of them) or a one-element list "
                f"naming one device, e.g. [0]."
            )
        return list(parsed) if isinstance(parsed, tuple) else parsed

    @staticmethod
    def get_parallel_devices(devices: int | list[int]) -> list[torch.device]:
        parsed = XLAAccelerator.parse_devices(devices)
        if isinstance(parsed, int):
            return [torch.device("xla", i) for i in range(parsed)]
        return [torch.device("xla", parsed[0])]

    @staticmethod
    def auto_device_count() -> int:
        if not xla_installed():
            return 0
        try:
            import torch_xla.runtime as xr

            return int(xr.global_runtime_device_count())
        except (ImportError, AttributeError, RuntimeError):  # an older runtime: at least the one device
            return 1

    @staticmethod
    def is_available() -> bool:
        try:
            return XLAAccelerator.auto_device_count() > 0
        except (ValueError, AssertionError, OSError):  # a runtime that cannot reach its devices
            return False

    def resolve_devices(self, devices: Any) -> list[torch.device]:
        if devices not in ("auto", 1, "1"):
            raise MisconfigurationException(
                f"devices={devices!r} with accelerator='tpu': fulmen trains on one XLA device (devices=1); "
                "several need torch_xla's multi-process launcher, which fulmen does not drive."
            )
        import torch_xla.core.xla_model as xm

        return [torch.device(xm.xla_device())]

FabricXLAAccelerator = XLAAccelerator  # Lightning Fabric's XLAAccelerator, the base of Lightning's: fulmen's is the one class

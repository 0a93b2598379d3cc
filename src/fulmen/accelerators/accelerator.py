"""The accelerator interface: what a piece of hardware tells the Trainer about its devices.

Each accelerator answers, without being instantiated, whether it exists here (``is_available``), how many
devices ``devices="auto"`` means (``auto_device_count``), how the ``devices`` flag reads (``parse_devices``)
and which ``torch.device`` objects the processes train on (``get_parallel_devices``). An instance prepares a
device for a run (``setup_device`` / ``setup``), releases it afterwards (``teardown``) and reports its statistics
(``get_device_stats``, for ``DeviceStatsMonitor``).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

import torch

from fulmen.utilities.exceptions import InvalidTypeError, MisconfigurationException

if TYPE_CHECKING:
    from fulmen.trainer import Trainer


class MissingPackageError(MisconfigurationException, ModuleNotFoundError):
    """A component needs a package (or hardware software stack) this machine lacks: both the
    ``ModuleNotFoundError`` Lightning raises then and fulmen's ``MisconfigurationException``, so either
    ``except`` clause catches it."""


class _Name(str):
    """An accelerator's name, read both ways programs read it: as a string (``accelerator.name == "cuda"``)
    and as Lightning's static method (``CUDAAccelerator.name()``). As a class attribute it is a descriptor
    that gives itself, on the class and on instances alike, as a static method gives its function."""

    __signature__ = inspect.Signature(return_annotation=str)  # what calling it takes: nothing, as name()

    def __call__(self) -> str:
        return str(self)

    def __get__(self, instance: object, owner: type | None = None) -> _Name:
        return self


def accelerator_name(accelerator: Any) -> str:
    """The name of ``accelerator`` whether it is a string attribute or a method (a user's subclass written
    for Lightning defines ``name()``)."""
    name = getattr(accelerator, "name", "")
    return str(name() if callable(name) else name)


class Accelerator(ABC):
    """Base class of the accelerators (subclass it for new hardware and pass an instance as
    ``Trainer(accelerator=...)``)."""

    @abstractmethod
    def setup_device(self, device: torch.device) -> None:
        """Make ``device`` the one this process computes on."""

    @abstractmethod
    def teardown(self) -> None:
        """Release what the run held on the device (called when the run ends)."""

    @staticmethod
    @abstractmethod
    def parse_devices(devices: Any) -> Any:
        """The ``devices`` flag in this accelerator's own terms (a count, a list of indices ...)."""

    @staticmethod
    @abstractmethod
    def get_parallel_devices(devices: Any) -> Any:
        """The ``torch.device`` of each process, from what :meth:`parse_devices` returned."""

    @staticmethod
    @abstractmethod
    def auto_device_count() -> int:
        """How many devices ``devices="auto"`` means."""

    @staticmethod
    @abstractmethod
    def is_available() -> bool:
        """Whether this machine has the hardware (and its software)."""

    @staticmethod
    @abstractmethod
    def name() -> str:
        """The accelerator's name in ``Trainer(accelerator=...)``."""

    @classmethod
    def register_accelerators(cls, accelerator_registry: Any) -> None:
        """Add this accelerator to a registry of names (nothing by default)."""

    def setup(self, trainer: Trainer) -> None:
        """Called by the strategy before the model moves to the device."""

    def get_device_stats(self, device: torch.device | str | int) -> dict[str, Any]:
        """Statistics of ``device`` for ``DeviceStatsMonitor``."""
        raise NotImplementedError(
            f"{type(self).__name__} reports no device statistics: implement get_device_stats(device) to use it "
            "with DeviceStatsMonitor."
        )

    def resolve_devices(self, devices: Any) -> list[torch.device]:
        """The Trainer's ``devices`` flag as one ``torch.device`` per process on this machine (``"auto"``:
        :meth:`auto_device_count` of them). Built-in accelerators check the flag more closely."""
        if devices == "auto":
            devices = self.auto_device_count()
        parsed = self.parse_devices(devices)
        if parsed is None or parsed == 0 or parsed == []:
            raise MisconfigurationException(
                f"Trainer(devices={devices!r}) selects no {accelerator_name(self)} device. Give a positive "
                "number of devices, a list of device indices, or 'auto'."
            )
        return list(self.get_parallel_devices(parsed))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _as_count(devices: Any) -> int | None:
    """``devices`` as a number of devices (-1: all of them), or ``None`` when it lists device indices."""
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
    """``[0, 2]``, ``(1,)``, ``'0,2'`` or ``'1,'`` as a list of device indices."""
    try:
        items = devices.split(",") if isinstance(devices, str) else list(devices)
        indices = [int(x) for x in items if not isinstance(x, str) or x.strip()]
    except (TypeError, ValueError):
        indices = []
    if not indices or any(isinstance(x, bool) for x in devices):
        raise InvalidTypeError(f"devices={devices!r} is not a list of device indices: use e.g. [0, 1] or '0,1'.")
    return indices

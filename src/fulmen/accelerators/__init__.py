"""Which hardware runs the model: the accelerators, their devices and the ``accelerator`` flag."""

from __future__ import annotations

from fulmen.accelerators.accelerator import Accelerator, MissingPackageError, accelerator_name
from fulmen.accelerators.cpu import CPUAccelerator, get_cpu_stats
from fulmen.accelerators.cuda import CUDAAccelerator, find_usable_cuda_devices
from fulmen.accelerators.hpu import HPUAccelerator
from fulmen.accelerators.mps import MPSAccelerator
from fulmen.accelerators.registry import AcceleratorRegistry
from fulmen.accelerators.xla import XLAAccelerator, require_xla
from fulmen.utilities.exceptions import InvalidValueError, MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.imports import lazy_exports as _lazy_exports

_ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu", "hpu")


def select_accelerator(accelerator: str | Accelerator) -> Accelerator:
    """Resolve the ``accelerator`` flag; ``'gpu'`` means CUDA or MPS, whichever this machine has."""
    if isinstance(accelerator, Accelerator):
        return accelerator
    if isinstance(accelerator, str) and AcceleratorRegistry.is_user_entry(accelerator):
        return AcceleratorRegistry.get(accelerator)  # a name registered (or replaced) with AcceleratorRegistry
    if not isinstance(accelerator, str) or accelerator.lower() not in _ACCELERATORS:
        registered = [name for name in AcceleratorRegistry if AcceleratorRegistry.is_user_entry(name)]
        raise InvalidValueError(
            f"accelerator={accelerator!r} is not supported. Use one of {list(_ACCELERATORS) + registered} "
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
                "accelerator='cuda' was requested, but torch sees no CUDA device. Install a CUDA build of torch on "
                "a machine with an NVIDIA GPU, or use accelerator='cpu'."
            )
        return CUDAAccelerator()
    if name == "mps":
        if not MPSAccelerator.is_available():
            raise MisconfigurationException(
                "accelerator='mps' was requested, but MPS (Apple silicon) is not available here. "
                "Use accelerator='cpu'."
            )
        return MPSAccelerator()
    if name == "tpu":
        require_xla("accelerator='tpu'")
        return XLAAccelerator()
    if not HPUAccelerator.is_available():
        raise MisconfigurationException(
            f"accelerator={accelerator!r} needs the `{HPUAccelerator.package}` package ({HPUAccelerator.install}), "
            "which is not installed here. Install it on a machine with that hardware, or use accelerator='cpu' / "
            "'gpu'."
        )
    return HPUAccelerator()


__all__ = [
    "Accelerator", "AcceleratorRegistry", "CPUAccelerator", "CUDAAccelerator", "HPUAccelerator", "MPSAccelerator", "MissingPackageError",
    "XLAAccelerator", "accelerator_name", "find_usable_cuda_devices", "get_cpu_stats", "select_accelerator",
]  # fmt: skip

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})
# a class Lightning 2.x deprecated (it warns when made): see fulmen._graveyard
__getattr__ = _lazy_aliases(__name__, {"TPUAccelerator": "fulmen._graveyard.TPUAccelerator"}, fallback=__getattr__)

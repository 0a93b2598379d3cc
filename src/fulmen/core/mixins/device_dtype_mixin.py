"""``DeviceDtypeModuleMixin``: the device and dtype a module was moved to, also for modules without parameters."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class DeviceDtypeModuleMixin(nn.Module):
    """Remembers where the module was moved and to which dtype, also for modules without parameters."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._device = torch.device("cpu")
        self._dtype: torch.dtype = torch.get_default_dtype()

    @property
    def device(self) -> torch.device:
        device = self._device
        # a bare "cuda" means the current CUDA device: report its index like tensors do
        if device.type == "cuda" and device.index is None:
            return torch.device("cuda", torch.cuda.current_device())
        return device

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @dtype.setter
    def dtype(self, new_dtype: torch.dtype) -> None:
        raise RuntimeError("Cannot set the dtype explicitly. Use module.to(new_dtype) instead.")

    def to(self, *args: Any, **kwargs: Any) -> Any:
        device, dtype = torch._C._nn._parse_to(*args, **kwargs)[:2]
        self._update(device=device, dtype=dtype)
        return super().to(*args, **kwargs)

    def cuda(self, device: torch.device | int | None = None) -> Any:
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        elif isinstance(device, int):
            device = torch.device("cuda", index=device)
        self._update(device=device)
        return super().cuda(device=device)

    def cpu(self) -> Any:
        self._update(device=torch.device("cpu"))
        return super().cpu()

    def type(self, dst_type: str | torch.dtype) -> Any:
        self._update(dtype=dst_type if isinstance(dst_type, torch.dtype) else None)
        return super().type(dst_type=dst_type)

    def float(self) -> Any:
        self._update(dtype=torch.float)
        return super().float()

    def double(self) -> Any:
        self._update(dtype=torch.double)
        return super().double()

    def half(self) -> Any:
        self._update(dtype=torch.half)
        return super().half()

    def bfloat16(self) -> Any:
        self._update(dtype=torch.bfloat16)
        return super().bfloat16()

    def _update(self, device: torch.device | None = None, dtype: torch.dtype | None = None) -> None:
        # propagate to every child that tracks its device too (nested LightningModules)
        for module in self.modules():
            if isinstance(module, DeviceDtypeModuleMixin):
                if device is not None:
                    module._device = torch.device(device)
                if dtype is not None and dtype.is_floating_point:
                    module._dtype = dtype

"""``FSDPPrecision``: the precision object of FSDP runs, given explicitly.

``FSDPStrategy(precision_plugin=FSDPPrecision("bf16-mixed"))`` or ``Trainer(strategy="fsdp",
plugins=[FSDPPrecision("bf16-mixed")])`` runs exactly as ``Trainer(strategy="fsdp", precision="bf16-mixed")``:
the object stands in for the precision object that flag selects (float32 shards and autocast for the mixed
precisions, the weights in half precision for the ``-true`` ones, a sharded gradient scaler for ``16-mixed``
on GPUs).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from fulmen.precision import Precision, select_precision
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_warn
from fulmen.utilities.types import Optimizable as Optimizable

if TYPE_CHECKING:
    from torch.distributed.fsdp import MixedPrecision as TorchMixedPrecision
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
    from torch.optim import Optimizer

_SUPPORTED = ("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed")
_LOW = {"16-true": torch.float16, "16-mixed": torch.float16, "bf16-true": torch.bfloat16, "bf16-mixed": torch.bfloat16}


class FSDPPrecision(Precision):
    """Full (``32-true``), half (``16-true``, ``bf16-true``) or mixed (``16-mixed``, ``bf16-mixed``) precision for
    FSDP. ``scaler``: the ``ShardedGradScaler`` of ``16-mixed`` (one is made on GPUs when not given)."""

    @property
    def compute_dtype(self) -> torch.dtype:
        """The gradient-reduction dtype of the mixed-precision config (float32 without one)."""
        return self.mixed_precision_config.reduce_dtype or torch.float32

    def __init__(self, precision: str, scaler: ShardedGradScaler | None = None) -> None:
        if precision not in _SUPPORTED:
            raise ValueError(
                f"FSDPPrecision(precision={precision!r}) is not supported. Use one of {list(_SUPPORTED)}."
            )
        if scaler is not None and precision != "16-mixed":
            raise ValueError(
                f"FSDPPrecision(precision={precision!r}, scaler={scaler!r}): only '16-mixed' scales gradients. "
                "Drop the scaler, or use precision='16-mixed'."
            )
        self.name = precision
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if precision == "16-mixed" and device == "cuda" and scaler is None:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            scaler = ShardedGradScaler()
        # the object the precision flag selects on this machine's device does the work
        self._inner: Precision = select_precision(precision, device)
        if scaler is not None:
            self._inner.scaler = scaler  # type: ignore[attr-defined]

    @property
    def scaler(self) -> Any:
        """The gradient scaler (``16-mixed`` on GPUs), else None; the strategy may replace it."""
        return getattr(self._inner, "scaler", None)

    @scaler.setter
    def scaler(self, scaler: Any) -> None:
        self._inner.scaler = scaler  # type: ignore[attr-defined]

    @property
    def mixed_precision_config(self) -> TorchMixedPrecision:
        """The same precision as torch's FSDP ``MixedPrecision`` (parameters, gradient reduction and buffers in
        the low dtype), for code that builds FSDP itself. fulmen's FSDPStrategy does not use it: see
        ``FSDPStrategy(mixed_precision=...)`` for what it does instead."""
        from torch.distributed.fsdp import MixedPrecision as TorchMixedPrecision

        if self.name in ("16-true", "bf16-true"):
            rank_zero_warn(
                f"FSDPPrecision({self.name!r}) computes in low precision, but FSDP keeps a full-precision copy of "
                "the parameters for sharding."
            )
        dtype = _LOW.get(self.name, torch.float32)
        return TorchMixedPrecision(param_dtype=dtype, reduce_dtype=dtype, buffer_dtype=dtype)

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        return self._inner.convert_module(module)

    def convert_input(self, data: Any) -> Any:
        return self._inner.convert_input(data)

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        return self._inner.forward_context()

    def tensor_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return self._inner.tensor_init_context()

    def module_init_context(self) -> contextlib.AbstractContextManager[Any]:
        return self._inner.module_init_context()

    def _scale_loss(self, tensor: Tensor) -> Tensor:
        return self._inner._scale_loss(tensor)

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        self._inner.unscale_gradients(optimizer)

    def _optimizer_step(
        self,
        optimizer: Optimizer,
        closure: Callable[[], Any],
        after_closure: Callable[[Optimizer], None] | None,
        **kwargs: Any,
    ) -> Any:
        return self._inner._optimizer_step(optimizer, closure, after_closure, **kwargs)

    def step_was_skipped(self, optimizer: Optimizer) -> bool:
        return self._inner.step_was_skipped(optimizer)

    def state_dict(self) -> dict[str, Any]:
        return self._inner.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._inner.load_state_dict(state_dict)

    def __getattr__(self, name: str) -> Any:
        # what the selected object has beyond the interface (``dtype``, ``device`` ...)
        if name == "_inner":  # not set yet (unpickling): no recursion through __getattr__
            raise AttributeError(name)
        return getattr(self._inner, name)


__all__ = ["FSDPPrecision"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "FSDPMixedPrecisionPlugin": "fulmen._graveyard.FSDPMixedPrecisionPlugin",
    "FSDPPrecisionPlugin": "fulmen._graveyard.FSDPPrecisionPlugin",
})  # fmt: skip

"""``measure_flops``: the floating-point operations of one forward (and backward) pass, counted by
``torch.utils.flop_counter`` (run it on the ``meta`` device to count without computing)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def measure_flops(model: torch.nn.Module, forward_fn: Callable[[], torch.Tensor],
                  loss_fn: Callable[[torch.Tensor], torch.Tensor] | None = None) -> int:  # fmt: skip
    """FLOPs of ``forward_fn()`` (and of the backward of ``loss_fn(output)`` when given) on ``model``."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        if loss_fn is None:
            forward_fn()
        else:
            loss_fn(forward_fn()).backward()
    return int(counter.get_total_flops())


__all__ = ["measure_flops"]

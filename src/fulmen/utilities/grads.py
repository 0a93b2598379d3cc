"""``grad_norm``: the norm of each parameter's gradient and of all of them together, ready to log."""

from __future__ import annotations

import functools

import torch
from torch import Tensor
from torch.nn import Module


def grad_norm(module: Module, norm_type: float | int | str, group_separator: str = "/") -> dict[str, Tensor]:
    """The ``norm_type``-norm of each parameter's gradient, as ``{"grad_2.0_norm/<name>": norm}``, and of all
    gradients viewed as one vector, as ``"grad_2.0_norm_total"`` (parameters without a gradient are left out;
    no gradient at all gives ``{}``). ``norm_type`` is a positive number or ``'inf'``; ``group_separator`` is
    what loggers group the per-parameter keys by (``self.log_dict(grad_norm(self, 2))`` in
    ``on_before_optimizer_step``).
    """
    try:
        p = float(norm_type)
    except TypeError as err:
        raise TypeError(
            f"`norm_type` must be a positive number or 'inf' (infinity norm). Got {norm_type!r} of type "
            f"{type(norm_type).__name__}: use e.g. grad_norm(module, norm_type=2)."
        ) from err
    except ValueError:
        p = float("nan")
    if not p > 0:  # also refuses nan: no norm is defined for it
        raise ValueError(
            f"`norm_type` must be a positive number or 'inf' (infinity norm). Got {norm_type!r}: use e.g. "
            "grad_norm(module, norm_type=2) or norm_type='inf'."
        )
    prefix = f"grad_{p}_norm"
    norms = {
        f"{prefix}{group_separator}{name}": param.grad.detach().norm(p)
        for name, param in module.named_parameters()
        if param.grad is not None
    }
    if norms:
        # the norm of the per-parameter norms is the norm of all gradients concatenated
        values = list(norms.values())
        dtype = functools.reduce(torch.promote_types, (n.dtype for n in values))
        norms[f"{prefix}_total"] = torch.stack([n.to("cpu", dtype) for n in values]).norm(p)
    return norms

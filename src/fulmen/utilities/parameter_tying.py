"""Tied (shared) parameters: find which parameter names point to one tensor, and tie them again after something
(moving a module to another device, e.g. under XLA) made separate copies."""

from __future__ import annotations

from typing import Any

from torch import nn


def find_shared_parameters(module: nn.Module) -> list[Any]:
    """The groups of names under which one parameter is registered more than once, e.g.
    ``[["encoder.weight", "decoder.weight"]]`` for an embedding tied to the output layer; each group lists the
    names in registration order, ``[]`` when nothing is shared."""
    names: dict[nn.Parameter, list[str]] = {}
    # every registration, duplicates included: named_parameters() reports a shared tensor (or a submodule
    # registered twice) only once
    for path, submodule in module.named_modules(remove_duplicate=False):
        for name, param in submodule.named_parameters(prefix=path, recurse=False, remove_duplicate=False):
            names.setdefault(param, []).append(name)
    return [group for group in names.values() if len(group) > 1]


def set_shared_parameters(module: nn.Module, shared_params: list[Any]) -> nn.Module:
    """Tie again each group of names from :func:`find_shared_parameters`: every name of a group is set to the
    object its first name holds now. Returns ``module`` (changed in place)."""
    for group in shared_params:
        first, *others = group
        reference = _get(module, first)
        for path in others:
            owner, _, attribute = path.rpartition(".")
            setattr(_get(module, owner) if owner else module, attribute, reference)
    return module


def _get(module: nn.Module, path: str) -> Any:
    target: Any = module
    for part in path.split("."):
        target = getattr(target, part)
    return target

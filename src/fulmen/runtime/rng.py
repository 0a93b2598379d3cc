"""Capture and restore every random generator a run draws from: exact resume redraws the same numbers."""

from __future__ import annotations

from typing import Any

import torch

# the global generators' state is captured where the bottom layer's isolate_rng needs it too
from fulmen.utilities.seed import capture_rng, restore_rng

__all__ = ["capture_generator_states", "capture_rng", "restore_generator_states", "restore_rng"]


def capture_generator_states(loader: Any) -> list[torch.Tensor | None]:
    """States of the private generators a dataloader shuffles with (loader and sampler ``generator``)."""
    return [g.get_state() if isinstance(g, torch.Generator) else None for g in _loader_generators(loader)]


def restore_generator_states(loader: Any, states: list[torch.Tensor | None]) -> None:
    for gen, state in zip(_loader_generators(loader), states):
        if isinstance(gen, torch.Generator) and state is not None:
            gen.set_state(state)


def _loader_generators(loader: Any) -> list[Any]:
    sampler = getattr(loader, "sampler", None)
    inner = getattr(getattr(loader, "batch_sampler", None), "sampler", None)
    return [getattr(loader, "generator", None), getattr(sampler, "generator", None),
            getattr(inner, "generator", None) if inner is not sampler else None]  # fmt: skip

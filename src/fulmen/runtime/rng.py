"""Capture and restore every random generator a run draws from: exact resume redraws the same numbers."""

from __future__ import annotations

import random
from typing import Any

import torch


def capture_rng() -> dict[str, Any]:
    """Every global RNG, as tensors and primitives (numpy's state is stored as a list of ints)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    try:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = np.random.get_state()  # type: ignore[misc]
        state["numpy"] = (str(kind), [int(k) for k in keys], int(pos), int(has_gauss), float(gauss))
    except ImportError:
        pass
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available():
        states = state["cuda"]
        if len(states) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(states)


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

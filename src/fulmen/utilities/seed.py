"""Seed every random number generator a training run touches."""

from __future__ import annotations

import os
import random

import torch

from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

_MAX_SEED = 2**32 - 1


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Seed python, numpy (if installed) and torch (all devices) and export ``PL_GLOBAL_SEED``.

    ``seed=None`` reads ``PL_GLOBAL_SEED`` or falls back to 0. ``workers=True`` also derives a distinct,
    reproducible seed for every dataloader worker (exported as ``PL_SEED_WORKERS``).
    """
    if seed is None:
        env_seed = os.environ.get("PL_GLOBAL_SEED")
        if env_seed is None:
            seed = 0
            rank_zero_warn(f"No seed found, seed set to {seed}")
        else:
            try:
                seed = int(env_seed)
            except ValueError:
                seed = 0
                rank_zero_warn(f"Invalid PL_GLOBAL_SEED={env_seed!r}; it must be an integer. Seed set to 0.")
    elif not isinstance(seed, int):
        seed = int(seed)
    if not (0 <= seed <= _MAX_SEED):
        rank_zero_warn(f"seed={seed} is out of bounds [0, {_MAX_SEED}]; using 0 instead.")
        seed = 0
    if verbose:
        rank_zero_info(f"Seed set to {seed}")
    os.environ["PL_GLOBAL_SEED"] = str(seed)
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # numpy is optional
        pass
    torch.manual_seed(seed)
    os.environ["PL_SEED_WORKERS"] = f"{int(workers)}"
    return seed


def reset_seed() -> None:
    """Re-apply the seed exported by an earlier :func:`seed_everything` (used in spawned processes)."""
    seed = os.environ.get("PL_GLOBAL_SEED")
    if seed is None:
        return
    seed_everything(int(seed), workers=bool(int(os.environ.get("PL_SEED_WORKERS", "0"))), verbose=False)


def pl_worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """Seed a dataloader worker from the global seed, the worker id and the process rank."""
    global_rank = rank if rank is not None else int(os.environ.get("RANK", 0))
    process_seed = torch.initial_seed()
    base_seed = process_seed - worker_id
    ss = [base_seed, worker_id, global_rank]
    import hashlib

    digest = hashlib.sha256(repr(ss).encode()).digest()
    torch_seed = int.from_bytes(digest[:8], "little")
    torch.manual_seed(torch_seed)
    random.seed(int.from_bytes(digest[8:16], "little"))
    try:
        import numpy as np

        np.random.seed(int.from_bytes(digest[16:20], "little"))
    except ImportError:
        pass

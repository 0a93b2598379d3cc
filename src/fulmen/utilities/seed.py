"""Seed every random number generator a training run touches."""

from __future__ import annotations

import os
import random
from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

import torch

from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

_MAX_SEED = 2**32 - 1


def seed_everything(
    seed: int | None = None, workers: bool = False, verbose: bool = True, *, samples: bool = True
) -> int:
    """Seed python, numpy (if installed) and torch (all devices) and export ``PL_GLOBAL_SEED``.

    ``seed=None`` reads ``PL_GLOBAL_SEED`` or falls back to 0. ``workers=True`` also derives a distinct,
    reproducible seed for every dataloader worker (exported as ``PL_SEED_WORKERS``).

    ``samples`` (fulmen): the training loader then loads each sample with the generators seeded from the seed,
    the epoch and the sample's index, so random augmentation in a dataset's ``__getitem__`` is the same on any
    number of workers or processes and after a resume (see :mod:`fulmen.utilities.sample_seeds`).
    ``samples=False`` (exported as ``PL_SEED_SAMPLES=0``) leaves the loading process's generators as they are.
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
    # exported only when turned off: the default adds no variable to the process environment (test suites
    # check that tests leave it as they found it)
    if samples:
        os.environ.pop("PL_SEED_SAMPLES", None)
    else:
        os.environ["PL_SEED_SAMPLES"] = "0"
    return seed


def reset_seed() -> None:
    """Re-apply the seed exported by an earlier :func:`seed_everything` (used in spawned processes)."""
    seed = os.environ.get("PL_GLOBAL_SEED")
    if seed is None:
        return
    seed_everything(int(seed), workers=bool(int(os.environ.get("PL_SEED_WORKERS", "0"))), verbose=False,
                    samples=os.environ.get("PL_SEED_SAMPLES", "1") != "0")  # fmt: skip


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


def capture_rng(include_cuda: bool | None = None) -> dict[str, Any]:
    """Every global generator's state: torch's, python's, numpy's (as plain ints, so a checkpoint can hold it)
    and CUDA's. ``include_cuda=None`` takes CUDA's only once CUDA is initialised (asking would initialise it,
    which a process about to fork must not do); ``True`` whenever CUDA is available; ``False`` never."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    try:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        state["numpy"] = (str(kind), np.asarray(keys).tolist(), int(pos), int(has_gauss), float(gauss))  # plain ints
    except ImportError:  # numpy is optional
        pass
    wanted = include_cuda if include_cuda is not None else torch.cuda.is_initialized()
    if wanted and torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Set the global generators back to a :func:`capture_rng` state (the parts it holds)."""
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


@contextmanager
def isolate_rng(include_cuda: bool = True) -> Generator[None, None, None]:
    """Draw random numbers inside the block without changing what the program draws after it: torch's,
    numpy's, python's and (``include_cuda=True``, when CUDA is available) CUDA's generators are put back on
    exit, also when the block raises. Pass ``include_cuda=False`` in a forked process, where CUDA must not be
    initialised."""
    state = capture_rng(include_cuda=include_cuda)
    try:
        yield
    finally:
        restore_rng(state)

"""Process groups that tests make in their own process."""

from __future__ import annotations

import torch.distributed as dist


def destroy_process_group() -> None:
    """``dist.destroy_process_group()``, after a barrier. On older torch (2.7 for one) destroying a gloo group
    just after a collective can deadlock: its worker thread is still releasing the collective's tensors, which
    takes the GIL, while the destructor holds the GIL and waits for the worker. The barrier runs after the
    collectives issued before it, and the caller waits for it without holding the GIL."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()

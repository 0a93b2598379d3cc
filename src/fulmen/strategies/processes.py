"""The processes a strategy runs and what passes between them: the ranks and the collectives, as one process
has them (a mixin of ``Strategy``: the rank 0 of one, collectives that return what they are given;
``ParallelStrategy`` overrides them for several)."""

from __future__ import annotations

import contextlib
from typing import Any

from torch import Tensor


class _ProcessesMixin:
    """``Strategy``'s ranks and collectives for a run in this process alone."""

    @property
    def world_size(self) -> int:
        return 1

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def is_distributed(self) -> bool:
        """Whether this strategy runs several processes that communicate (DDP and its kind)."""
        return False

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """How a DistributedSampler shares the data: one share per process. Model parallelism shares it per
        data-parallel group (the processes of one tensor-parallel group see the same batch)."""
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    # -- collectives (identity for one process) --------------------------------------------------------
    def reduce(self, tensor: Any, group: Any = None, reduce_op: str | None = "mean") -> Any:
        return tensor

    def barrier(self, name: str | None = None) -> None:
        pass

    def all_wait_after(self, name: str) -> contextlib.AbstractContextManager[None]:
        """A block after which every process waits, without a time limit, until all have finished it (one
        process alone: nothing to wait for). For work one process does while the others wait for its result,
        for however long it takes: ``prepare_data`` downloading a data set on rank 0."""
        return contextlib.nullcontext()

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    def all_gather(self, tensor: Tensor, group: Any = None, sync_grads: bool = False) -> Tensor:
        return tensor

    def gather_objects(self, obj: Any) -> list[Any] | None:
        """Every process's ``obj`` (picklable), in rank order; ``None`` where the processes can no longer meet
        (the process group was left after an error)."""
        return [obj]

    def reduce_boolean_decision(self, decision: bool, all: bool = True) -> bool:
        return decision

    def sync_metric(self, tensor: Tensor, reduce_op: str) -> Tensor:
        return tensor

    def block_backward_sync(self) -> contextlib.AbstractContextManager[Any]:
        """Skip gradient synchronisation inside this block (a no-op with one process)."""
        return _NO_SYNC_TO_BLOCK


# one for every call: a nullcontext holds no state, and a block per step then allocates nothing
_NO_SYNC_TO_BLOCK = contextlib.nullcontext()

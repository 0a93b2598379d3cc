"""Out-of-memory errors told apart from real ones, freeing memory after them, and detaching tensors kept for later
(the batch-size finder and ``Trainer`` outputs rely on these)."""

from __future__ import annotations

import gc
from typing import Any

import torch
from torch import Tensor

from fulmen.utilities.apply_func import apply_to_collection


def recursive_detach(in_dict: Any, to_cpu: bool = False) -> Any:
    """``in_dict`` (any collection: dicts, lists, tuples, dataclasses, nested) with every tensor detached from its
    graph, and moved to the CPU with ``to_cpu=True``; other values are kept as they are."""

    def detach(t: Tensor) -> Tensor:
        t = t.detach()
        return t.cpu() if to_cpu else t

    return apply_to_collection(in_dict, Tensor, detach)


def _single_message(exception: BaseException) -> str | None:
    """The message of a ``RuntimeError`` raised with one string argument, the form allocator errors take."""
    if isinstance(exception, RuntimeError) and len(exception.args) == 1 and isinstance(exception.args[0], str):
        return exception.args[0]
    return None


def is_cuda_out_of_memory(exception: BaseException) -> bool:
    """CUDA's caching allocator could not allocate (``torch.cuda.OutOfMemoryError`` and its older message)."""
    message = _single_message(exception)
    return message is not None and "CUDA" in message and "out of memory" in message


def is_cudnn_snafu(exception: BaseException) -> bool:
    """cuDNN refused an operation for lack of memory for its workspace (it says NOT_SUPPORTED)."""
    message = _single_message(exception)
    return message is not None and "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED." in message


def is_out_of_cpu_memory(exception: BaseException) -> bool:
    """The CPU allocator could not allocate."""
    message = _single_message(exception)
    return message is not None and "DefaultCPUAllocator: can't allocate memory" in message


# allocators whose out-of-memory errors the three checks above do not cover; the batch-size finder must stop
# growing the batch on those devices too, instead of failing the search
_OTHER_OOM_MESSAGES = ("MPS backend out of memory", "CUDNN_STATUS_ALLOC_FAILED")


def is_oom_error(exception: BaseException) -> bool:
    """Whether ``exception`` means an allocator ran out of memory (anything else is a real error): CUDA, cuDNN,
    the CPU allocator, and also Apple's MPS, cuDNN's failed workspace allocation and any
    ``torch.cuda.OutOfMemoryError``."""
    if is_cuda_out_of_memory(exception) or is_cudnn_snafu(exception) or is_out_of_cpu_memory(exception):
        return True
    if isinstance(exception, torch.cuda.OutOfMemoryError):  # raised by code of its own, with another message
        return True
    message = _single_message(exception)
    return message is not None and any(text in message for text in _OTHER_OOM_MESSAGES)


def garbage_collection_cuda() -> None:
    """Collect garbage (tensors in reference cycles), then hand CUDA's cached blocks back to the driver. Emptying
    the cache may itself run out of memory; that is ignored, any other error is raised."""
    gc.collect()
    try:
        torch.cuda.empty_cache()
    except RuntimeError as exception:
        if not is_oom_error(exception):
            raise

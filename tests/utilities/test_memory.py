"""Out-of-memory errors are told apart from real ones as Lightning does (plus the allocators it misses), memory is
freed after them, and recursive_detach detaches (and moves) every tensor of a collection."""

from __future__ import annotations

import gc
from dataclasses import dataclass

import pytest
import torch

from fulmen.utilities import memory
from tests.parity import oracle

MESSAGES = [
    "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity)",
    "CUDA error: out of memory",
    "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
    "[enforce fail at alloc_cpu.cpp:116] . DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB",
    "shape mismatch: value tensor of shape [2] cannot be broadcast",
    "cuda out of memory",  # the checks are case-sensitive, as Lightning's
    "MPS backend out of memory (MPS allocated: 1.00 GB)",
    "cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
]


def _errors():
    for message in MESSAGES:
        yield RuntimeError(message)
        yield ValueError(message)  # only RuntimeErrors are allocator errors
        yield RuntimeError(message, "second argument")  # allocators raise with one argument
    yield RuntimeError()
    yield RuntimeError(3)
    yield KeyboardInterrupt()


@oracle.parity
def test_the_three_checks_are_lightnings():
    oracle.lightning()
    from lightning.pytorch.utilities import memory as theirs

    for error in _errors():
        for name in ("is_cuda_out_of_memory", "is_cudnn_snafu", "is_out_of_cpu_memory"):
            try:
                expected = getattr(theirs, name)(error)
            except TypeError:  # Lightning's check fails on a message that is not a string
                expected = False
            assert getattr(memory, name)(error) is expected, (name, error)


@oracle.parity
def test_is_oom_error_is_lightnings_plus_mps_cudnn_alloc_and_the_cuda_error_class():
    oracle.lightning()
    from lightning.pytorch.utilities import memory as theirs

    extra = {"MPS backend out of memory (MPS allocated: 1.00 GB)", "cuDNN error: CUDNN_STATUS_ALLOC_FAILED"}
    for error in _errors():
        try:
            expected = theirs.is_oom_error(error)
        except TypeError:
            expected = False
        if type(error) is RuntimeError and len(error.args) == 1 and error.args[0] in extra:
            assert not expected and memory.is_oom_error(error)  # the deliberate difference
        else:
            assert memory.is_oom_error(error) is expected, error
    assert memory.is_oom_error(torch.cuda.OutOfMemoryError("raised by a library with its own message"))


def test_the_batch_size_finder_uses_these_checks():
    from fulmen.tuner import batch_size_scaling

    assert batch_size_scaling.is_oom_error is memory.is_oom_error


@oracle.parity
@pytest.mark.parametrize("to_cpu", [False, True])
def test_recursive_detach(to_cpu):
    oracle.lightning()
    from lightning.pytorch.utilities.memory import recursive_detach

    @dataclass
    class Output:
        loss: torch.Tensor
        name: str

    x = torch.ones(3, requires_grad=True)
    data = {"loss": x * 2, "nested": [x + 1, (x.sum(), "text")], "out": Output(x * 3, "o"), "n": 4}
    ours, theirs = memory.recursive_detach(data, to_cpu=to_cpu), recursive_detach(data, to_cpu=to_cpu)
    assert ours["n"] == 4 and ours["nested"][1][1] == "text" and ours["out"].name == "o"
    pairs = [(ours["loss"], theirs["loss"]), (ours["nested"][0], theirs["nested"][0]),
             (ours["nested"][1][0], theirs["nested"][1][0]), (ours["out"].loss, theirs["out"].loss)]  # fmt: skip
    for a, b in pairs:
        assert not a.requires_grad and a.grad_fn is None and torch.equal(a, b) and a.device == b.device
    assert type(ours["nested"][1]) is tuple and data["loss"].requires_grad  # structure kept, input untouched


@oracle.parity
def test_garbage_collection_cuda_ignores_only_out_of_memory(monkeypatch):
    oracle.lightning()
    from lightning.pytorch.utilities.memory import garbage_collection_cuda

    memory.garbage_collection_cuda()  # runs with or without CUDA
    collected = []
    monkeypatch.setattr(gc, "collect", lambda *args: collected.append(args))  # a full collection costs seconds here
    for message, raises in ((MESSAGES[0], False), ("driver shut down", True)):

        def empty_cache(message=message):
            raise RuntimeError(message)

        monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
        for collect in (memory.garbage_collection_cuda, garbage_collection_cuda):
            if raises:
                with pytest.raises(RuntimeError, match=message):
                    collect()
            else:
                collect()
    assert len(collected) == 4  # the garbage is collected before the cache is emptied, every time

"""utilities.testing._runif_reasons: the reasons a RunIf marker skips, the same as Lightning's on this
machine for every condition."""

from __future__ import annotations

import inspect

import pytest

from fulmen.utilities.testing import _runif_reasons
from tests.parity import oracle

CONDITIONS = [
    {}, {"min_cuda_gpus": 1}, {"min_cuda_gpus": 0}, {"min_torch": "2.0"}, {"min_torch": "99.0"},
    {"max_torch": "2.0"}, {"max_torch": "99.0"}, {"min_torch": "2.13.0"}, {"max_torch": "2.13.0"},
    {"min_python": "3.8"}, {"min_python": "3.99"}, {"bf16_cuda": True}, {"tpu": True}, {"mps": True},
    {"mps": False}, {"skip_windows": True}, {"standalone": True}, {"deepspeed": True}, {"dynamo": True},
    {"rich": True}, {"omegaconf": True}, {"psutil": True}, {"sklearn": True}, {"onnx": True}, {"linux_only": True},
    {"onnxscript": True}, {"tensorrt": True},
    {"min_cuda_gpus": 2, "min_torch": "99", "standalone": True, "tpu": True, "omegaconf": True, "tensorrt": True},
]  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("conditions", CONDITIONS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "none")
def test_reasons_are_lightnings(conditions, monkeypatch):
    monkeypatch.delenv("PL_RUN_STANDALONE_TESTS", raising=False)
    theirs = oracle.lightning("lightning.pytorch.utilities.testing")._runif_reasons(**conditions)
    assert _runif_reasons(**conditions) == theirs


def test_standalone_runs_when_the_environment_asks(monkeypatch):
    monkeypatch.setenv("PL_RUN_STANDALONE_TESTS", "1")
    assert _runif_reasons(standalone=True) == ([], {"standalone": True})
    monkeypatch.setenv("PL_RUN_STANDALONE_TESTS", "0")
    assert _runif_reasons(standalone=True) == (["Standalone execution"], {"standalone": True})


def test_a_condition_that_fails_is_named():
    reasons, flags = _runif_reasons(min_python="3.99", min_torch="99.0", min_cuda_gpus=64)
    assert reasons[0] == "GPUs>=64" and "python>=3.99" in reasons and reasons[1].startswith("torch>=99.0, 2.")
    assert flags == {"min_cuda_gpus": True}


@oracle.parity
def test_signature_is_lightnings():
    theirs = oracle.lightning("lightning.pytorch.utilities.testing")._runif_reasons

    def parameters(fn):
        return [(n, p.kind, p.default) for n, p in inspect.signature(fn).parameters.items()]

    assert parameters(_runif_reasons) == parameters(theirs)

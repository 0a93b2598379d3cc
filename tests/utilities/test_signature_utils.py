"""is_param_in_hook_signature: which arguments a hook method can be passed, as Lightning decides."""

from __future__ import annotations

import functools

import pytest

from fulmen.utilities.signature_utils import is_param_in_hook_signature
from tests.parity import oracle


def _decorated(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


class _Hooks:
    def named(self, batch, batch_idx):
        pass

    def one(self, batch):
        pass

    def var_args(self, batch, *args):
        pass

    def keyword_only(self, batch, *, batch_idx=0):
        pass

    @_decorated
    def decorated(self, batch, batch_idx, dataloader_idx=0):
        pass

    def three(self, a, b, c):
        pass


CASES = [(name, param, explicit, min_args) for name in ("named", "one", "var_args", "keyword_only", "decorated", "three")
         for param in ("batch_idx", "dataloader_idx") for explicit in (False, True) for min_args in (None, 2, 3)]  # fmt: skip


@oracle.parity
def test_answers_are_lightnings():
    theirs = oracle.lightning("lightning.pytorch.utilities.signature_utils").is_param_in_hook_signature
    hooks = _Hooks()
    for name, param, explicit, min_args in CASES:
        for hook in (getattr(hooks, name), getattr(_Hooks, name)):  # bound, and as read from the class
            ours = is_param_in_hook_signature(hook, param, explicit=explicit, min_args=min_args)
            assert ours == theirs(hook, param, explicit=explicit, min_args=min_args), (name, param, explicit, min_args)


@pytest.mark.parametrize(
    ("name", "param", "kwargs", "expected"),
    [("named", "batch_idx", {}, True), ("one", "batch_idx", {}, False), ("var_args", "batch_idx", {}, True),
     ("var_args", "batch_idx", {"explicit": True}, False), ("keyword_only", "batch_idx", {}, False),
     ("decorated", "dataloader_idx", {"explicit": True}, True), ("one", "batch_idx", {"min_args": 1}, True),
     ("three", "x", {"min_args": 4}, False)],
)  # fmt: skip
def test_what_counts(name, param, kwargs, expected):
    assert is_param_in_hook_signature(getattr(_Hooks(), name), param, **kwargs) is expected

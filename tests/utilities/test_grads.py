"""grad_norm gives Lightning's keys and values: per-parameter norms and the total, for any p-norm."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fulmen.utilities import grad_norm
from tests.parity import oracle


def _model(dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2, bias=False), nn.Linear(2, 2)).to(dtype)
    model[3].requires_grad_(False)  # no gradient: left out
    model(torch.randn(5, 4, dtype=dtype)).pow(2).sum().backward()
    return model


@oracle.parity
@pytest.mark.parametrize("norm_type", [2, 1, "inf", 0.5, 3.0, "2", float("inf")])
@pytest.mark.parametrize("separator", ["/", "."])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_keys_and_values_are_lightnings(norm_type, separator, dtype):
    oracle.lightning()
    from lightning.pytorch.utilities import grad_norm as lightning_grad_norm

    model = _model(dtype)
    ours, theirs = grad_norm(model, norm_type, separator), lightning_grad_norm(model, norm_type, separator)
    assert list(ours) == list(theirs)
    assert all(norm > 0 for norm in ours.values())
    for key in ours:
        assert ours[key].dtype == theirs[key].dtype and torch.equal(ours[key], theirs[key]), key
    p = float(norm_type)
    assert f"grad_{p}_norm{separator}0.weight" in ours and not any(f"{separator}3." in key for key in ours)
    # the total is the norm of all gradients as one vector
    flat = torch.cat([param.grad.flatten() for param in model.parameters() if param.grad is not None])
    torch.testing.assert_close(ours[f"grad_{p}_norm_total"], flat.norm(p))


def test_no_gradients_gives_an_empty_dict():
    assert grad_norm(nn.Linear(2, 2), 2) == {}


@oracle.parity
@pytest.mark.parametrize(("norm_type", "error"), [(0, ValueError), (-1, ValueError), ("abc", ValueError),
                                                  (float("nan"), ValueError), (None, TypeError)])  # fmt: skip
def test_bad_norm_types(norm_type, error):
    oracle.lightning()
    from lightning.pytorch.utilities import grad_norm as lightning_grad_norm

    model = _model()
    with pytest.raises(error, match="norm_type"):
        grad_norm(model, norm_type)
    if norm_type == norm_type:  # Lightning accepts nan (and returns nan norms): fulmen refuses it early
        with pytest.raises(error):
            lightning_grad_norm(model, norm_type)

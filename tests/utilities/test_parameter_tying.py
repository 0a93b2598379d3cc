"""find_shared_parameters / set_shared_parameters: the same groups as Lightning's, and ties restored."""

from __future__ import annotations

import torch
from torch import nn

from fulmen.utilities import find_shared_parameters, set_shared_parameters
from tests.parity import oracle


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.body = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
        self.body[2].weight = self.body[0].weight  # tied inside a submodule
        self.out = nn.Linear(4, 10, bias=False)
        self.out.weight = self.embed.weight  # output layer tied to the embedding
        self.twice = self.body  # one submodule under two names: all its parameters are shared
        self.empty = None


@oracle.parity
def test_groups_are_lightnings():
    oracle.lightning()
    from lightning.pytorch.utilities import find_shared_parameters as theirs

    model = Tied()
    groups = find_shared_parameters(model)
    assert groups == theirs(model)
    assert ["embed.weight", "out.weight"] in groups
    assert ["body.0.weight", "body.2.weight", "twice.0.weight", "twice.2.weight"] in groups
    assert find_shared_parameters(nn.Linear(2, 2)) == theirs(nn.Linear(2, 2)) == []


@oracle.parity
def test_set_shared_parameters_ties_copies_again():
    oracle.lightning()
    from lightning.pytorch.utilities import set_shared_parameters as theirs

    results = []
    for tie in (set_shared_parameters, theirs):
        model = Tied()
        shared = find_shared_parameters(model)
        # what moving to some devices does: each name gets its own copy
        model.out.weight = nn.Parameter(model.embed.weight.detach().clone())
        model.body[2].weight = nn.Parameter(model.body[0].weight.detach().clone())
        assert model.out.weight is not model.embed.weight
        assert tie(model, shared) is model
        assert model.out.weight is model.embed.weight and model.body[2].weight is model.body[0].weight
        results.append(find_shared_parameters(model))
    assert results[0] == results[1]
    with torch.no_grad():
        model.embed.weight.fill_(1.0)
    assert torch.equal(model.out.weight, torch.ones(10, 4))

"""DCP's stager for the background sharded saves: kept from one save to the next only where the installed torch
lets a stager stage again (some, 2.11 for one, close its copier after each staging)."""

from __future__ import annotations

import pytest
import torch

from fulmen.checkpoint import sharded as distributed_checkpoint
from fulmen.strategies import FSDPStrategy

staging = pytest.importorskip("torch.distributed.checkpoint.staging")
pytestmark = pytest.mark.skipif(not hasattr(staging, "DefaultStager"), reason="DCP's DefaultStager came with torch 2.9")


def test_the_reuse_probe_agrees_with_a_second_staging_of_a_class():
    stager = distributed_checkpoint.new_stager(pinned=False)
    state = {"weight": torch.arange(4.0), "kind": torch.nn.Tanh}
    try:
        first = stager.stage(state)
        try:
            second = stager.stage(state)
        except KeyError:  # this torch's stager cannot stage twice: the probe must say so
            assert not distributed_checkpoint.stagers_are_reusable()
            return
    finally:
        stager.close()
    assert distributed_checkpoint.stagers_are_reusable()
    assert torch.equal(second["weight"], state["weight"]) and second["kind"] is torch.nn.Tanh
    assert first["weight"] is not state["weight"]  # a copy in host memory, not the training tensor


@pytest.mark.parametrize("reusable", [True, False])
def test_the_strategy_keeps_its_stager_only_where_it_can_stage_again(monkeypatch, reusable):
    monkeypatch.setattr(distributed_checkpoint, "stagers_are_reusable", lambda: reusable)
    strategy = FSDPStrategy(state_dict_type="sharded")
    monkeypatch.setattr(FSDPStrategy, "root_device", property(lambda self: torch.device("cpu")))
    first, second = strategy._stager(), strategy._stager()
    try:
        assert isinstance(first, staging.DefaultStager) and isinstance(second, staging.DefaultStager)
        assert (first is second) is reusable
    finally:
        first.close()
        second.close()

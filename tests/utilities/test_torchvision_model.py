"""get_torchvision_model builds a torchvision architecture by name, and names the package when it is missing."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest
from torch import nn

from fulmen.utilities.model_helpers import get_torchvision_model


def test_missing_torchvision_is_named(monkeypatch):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "torchvision" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    with pytest.raises(ModuleNotFoundError, match="pip install torchvision"):
        get_torchvision_model("resnet18")


def test_the_model_comes_from_torchvision_get_model(monkeypatch):
    calls = []

    def get_model(name, **kwargs):
        calls.append((name, kwargs))
        return nn.Linear(2, 2)

    fake = types.ModuleType("torchvision")
    fake.models = types.SimpleNamespace(get_model=get_model)
    fake.__spec__ = importlib.machinery.ModuleSpec("torchvision", loader=None)
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    model = get_torchvision_model("resnet18", weights=None, num_classes=3)
    assert isinstance(model, nn.Linear) and calls == [("resnet18", {"weights": None, "num_classes": 3})]

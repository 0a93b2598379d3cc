"""utilities.argparse: constructor defaults from ``PL_<CLASS>_<ARGUMENT>`` environment variables."""

from __future__ import annotations

from argparse import Namespace

import pytest

from fulmen.utilities.argparse import _defaults_from_env_vars, _parse_env_variables
from tests.parity import oracle


class Widget:
    @_defaults_from_env_vars
    def __init__(self, devices="auto", lr=0.1, name=None, flags=()):
        self.devices, self.lr, self.name, self.flags = devices, lr, name, flags


ENVIRONMENT = {"PL_WIDGET_DEVICES": "4", "PL_WIDGET_LR": "1e-3", "PL_WIDGET_NAME": "run-1",
               "PL_WIDGET_FLAGS": "[1, 'a']", "PL_WIDGET_UNKNOWN": "1", "PL_OTHER_LR": "5"}  # fmt: skip


def _set(monkeypatch, values):
    for key, value in values.items():
        monkeypatch.setenv(key, value)


@oracle.parity
def test_environment_values_are_parsed_as_lightning_parses_them(monkeypatch):
    _set(monkeypatch, {**ENVIRONMENT, "PL_WIDGET_NAME": ""})  # an empty value is no value
    theirs = oracle.lightning("lightning.pytorch.utilities.argparse")._parse_env_variables(Widget)
    ours = _parse_env_variables(Widget)
    assert ours == theirs
    assert vars(ours) == {"devices": 4, "lr": 1e-3, "flags": [1, "a"]}
    assert _parse_env_variables(Widget, template="X_%(cls_argument)s") == Namespace()


def test_the_environment_gives_defaults_and_the_code_wins(monkeypatch):
    _set(monkeypatch, ENVIRONMENT)
    widget = Widget()
    assert (widget.devices, widget.lr, widget.name, widget.flags) == (4, 1e-3, "run-1", [1, "a"])
    widget = Widget(2, name="mine")  # positional and keyword arguments override the environment
    assert (widget.devices, widget.lr, widget.name) == (2, 1e-3, "mine")
    monkeypatch.delenv("PL_WIDGET_DEVICES")
    assert Widget().devices == "auto"


def test_a_value_that_is_no_literal_stays_a_string(monkeypatch):
    _set(monkeypatch, {"PL_WIDGET_NAME": "gpu:0", "PL_WIDGET_DEVICES": "[unclosed"})
    widget = Widget()
    assert (widget.name, widget.devices) == ("gpu:0", "[unclosed")


def test_an_unknown_argument_from_code_still_fails(monkeypatch):
    with pytest.raises(TypeError, match="bogus"):
        Widget(bogus=1)

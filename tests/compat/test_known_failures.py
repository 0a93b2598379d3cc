"""The list of Lightning-suite tests fulmen does not pass: every line accounted for in one of three ways."""

from __future__ import annotations

import re
from pathlib import Path

from tests.compat.update_known_failures import DELIBERATE, classify

LIST = Path(__file__).with_name("lightning_suite_known_failures.txt")


def test_every_entry_names_a_test_and_a_kind_of_reason():
    entries = [line for line in LIST.read_text().splitlines() if line and not line.startswith("#")]
    assert entries
    for line in entries:
        test, reason = line.split("\t")
        assert re.fullmatch(r"[\w/]+\.py::\S.*", test), line
        assert re.fullmatch(r"(internal|deliberate|not yet): \S.*", reason), line
    assert len({line.split("\t")[0] for line in entries}) == len(entries)  # no test twice


def test_the_classification_rules():
    assert classify("test_x::t", "AttributeError: 'Trainer' object has no attribute '_data_connector'") == (
        "internal: private attribute _data_connector"
    )
    assert classify("test_x::t", "AssertionError: assert 8 == 7").startswith("not yet: AssertionError")
    pattern = next(iter(DELIBERATE))
    assert classify(pattern.replace("\\", ""), "anything").startswith("deliberate: ")

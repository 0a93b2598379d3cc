"""rank_zero_*: Lightning's signatures, the line a warning or log record is attributed to, rank filtering,
WarningCache, and redirecting the messages through ``rank_zero_module.log``."""

from __future__ import annotations

import inspect
import logging
import warnings

import pytest

from fulmen.utilities import rank_zero
from fulmen.utilities.rank_zero import (
    LightningDeprecationWarning,
    WarningCache,
    rank_prefixed_message,
    rank_zero_debug,
    rank_zero_deprecation,
    rank_zero_info,
    rank_zero_only,
    rank_zero_warn,
)
from fulmen.utilities.warnings import PossibleUserWarning
from tests.parity import oracle


def _emit_all(module):
    """Each warning function of ``module`` once, from known lines; returns those line numbers."""
    first = inspect.currentframe().f_lineno + 1
    module.rank_zero_warn("warn")
    module.rank_zero_deprecation("deprecation")
    module.WarningCache().warn("cache warn", category=PossibleUserWarning if module is rank_zero else UserWarning)
    module.WarningCache().deprecation("cache deprecation")
    module.rank_zero_warn("category", category=RuntimeWarning)
    return list(range(first, first + 5))


def _record(module):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        lines = _emit_all(module)
    return [(w.filename, w.lineno, str(w.message), w.category.__name__) for w in record], lines


@oracle.parity
def test_warnings_point_at_the_caller_with_lightnings_categories():
    oracle.lightning()
    import lightning.pytorch.utilities.rank_zero as lightning_rank_zero

    ours, lines = _record(rank_zero)
    theirs, _ = _record(lightning_rank_zero)
    assert [(f, n) for f, n, _, _ in ours] == [(__file__, line) for line in lines]
    assert [(f, n, m) for f, n, m, _ in ours] == [(f, n, m) for f, n, m, _ in theirs]
    assert [c for *_, c in ours] == ["UserWarning", "LightningDeprecationWarning", "PossibleUserWarning",
                                     "LightningDeprecationWarning", "RuntimeWarning"]  # fmt: skip


def _parameters(fn):
    return [(n, p.kind, p.default) for n, p in inspect.signature(fn).parameters.items()]


@oracle.parity
@pytest.mark.parametrize(
    "name",
    ["rank_zero_warn", "rank_zero_deprecation", "rank_zero_info", "rank_zero_debug", "rank_prefixed_message",
     "rank_zero_only", "WarningCache.warn", "WarningCache.deprecation", "WarningCache.info"],
)  # fmt: skip
def test_signatures_are_lightnings(name):
    theirs, ours = oracle.lightning("lightning.pytorch.utilities.rank_zero"), rank_zero
    for part in name.split("."):
        theirs, ours = getattr(theirs, part), getattr(ours, part)
    assert _parameters(ours) == _parameters(theirs)


def test_log_records_name_the_calling_function(caplog):
    def caller():
        rank_zero_info("info %s", "message")
        rank_zero_debug("debug")
        WarningCache().info("cached info")

    with caplog.at_level(logging.DEBUG, logger="fulmen"):
        caller()
    assert [(r.getMessage(), r.levelname, r.funcName) for r in caplog.records] == [
        ("info message", "INFO", "caller"), ("debug", "DEBUG", "caller"), ("cached info", "INFO", "caller")
    ]  # fmt: skip


def test_the_messages_follow_rank_zero_module_log(monkeypatch, caplog):
    other = logging.getLogger("my_application")
    monkeypatch.setattr(rank_zero.rank_zero_module, "log", other)
    with caplog.at_level(logging.INFO, logger="my_application"):
        rank_zero_info("redirected")
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("my_application", "redirected")]


def test_other_ranks_stay_silent(monkeypatch, caplog):
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    with warnings.catch_warnings(record=True) as record, caplog.at_level(logging.DEBUG, logger="fulmen"):
        warnings.simplefilter("always")
        rank_zero_warn("no")
        rank_zero_deprecation("no")
        rank_zero_info("no")
        WarningCache().warn("no")
    assert record == [] and caplog.records == []
    assert rank_zero_only(lambda: "ran", default="skipped")() == "skipped"


def test_warning_cache_emits_each_message_once():
    cache = WarningCache()
    with pytest.warns(LightningDeprecationWarning) as record:
        for _ in range(3):
            cache.deprecation("going away")
            cache.warn("careful", category=LightningDeprecationWarning)
    assert [str(w.message) for w in record] == ["going away", "careful"]
    assert cache == {"going away", "careful"}


def test_deprecation_category_can_be_replaced():
    with pytest.warns(FutureWarning, match="soon"):
        rank_zero_deprecation("soon", category=FutureWarning)


@oracle.parity
@pytest.mark.parametrize("rank", [None, 0, 3])
def test_rank_prefixed_message_is_lightnings(rank):
    theirs = oracle.lightning("lightning.pytorch.utilities.rank_zero").rank_prefixed_message
    assert rank_prefixed_message("hello", rank) == theirs("hello", rank)
    assert rank_prefixed_message("hello", 3) == "[rank: 3] hello"

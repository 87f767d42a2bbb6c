"""The browser's list filters: forgiving of empty fields, explicit about what it ignored."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from remediator.model.states import State
from remediator.web.filters import parse_filters, parse_time


def test_empty_form_filters_nothing_and_puts_in_flight_first() -> None:
    parsed = parse_filters({"q": [""], "xid": [""], "state": [""], "dry_run": [""]})
    assert parsed.problems == ()
    assert parsed.filters.in_flight_first is True
    assert parsed.filters.node_search is None and parsed.filters.states == frozenset()


def test_every_field() -> None:
    parsed = parse_filters(
        {
            "q": [" node-1 "],
            "node": ["gpu-node-1"],
            "pool": ["a"],
            "state": ["held", "failed"],
            "signal_kind": ["xid"],
            "xid": ["79"],
            "policy": ["p"],
            "from": ["2026-03-01"],
            "to": ["2026-03-02T10:30"],
            "dry_run": ["yes"],
            "order": ["newest"],
        }
    )
    f = parsed.filters
    assert parsed.problems == ()
    assert (f.node_search, f.node, f.pool, f.policy) == ("node-1", "gpu-node-1", "a", "p")
    assert f.states == {State.HELD, State.FAILED}
    assert (f.signal_kind, f.xid_code, f.dry_run) == ("xid", 79, True)
    assert f.created_from == datetime(2026, 3, 1, tzinfo=UTC)
    assert f.created_to == datetime(2026, 3, 2, 10, 30, tzinfo=UTC)
    assert f.in_flight_first is False
    assert parsed.states == {"held", "failed"}


def test_bad_values_are_ignored_and_named() -> None:
    parsed = parse_filters(
        {
            "state": ["exploded"],
            "signal_kind": ["cosmic"],
            "xid": ["-1"],
            "from": ["yesterday"],
            "q": ["a\x00b"],
            "pool": ["x" * 300],
        }
    )
    assert parsed.filters.states == frozenset()
    assert parsed.filters.signal_kind is None and parsed.filters.xid_code is None
    assert parsed.filters.node_search is None and parsed.filters.pool is None
    assert parsed.problems == (
        "q: not a usable value",
        "pool: not a usable value",
        "unknown state 'exploded'",
        "unknown signal kind 'cosmic'",
        "XID must be a number, not '-1'",
        "from: not a date or time: 'yesterday'",
    )


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2026-03-01T12:00:00Z", datetime(2026, 3, 1, 12, tzinfo=UTC)),
        ("2026-03-01T14:00:00+02:00", datetime(2026, 3, 1, 12, tzinfo=UTC)),
        ("2026-03-01T12:00", datetime(2026, 3, 1, 12, tzinfo=UTC)),
    ],
)
def test_parse_time(raw: str, expected: datetime) -> None:
    assert parse_time(raw) == expected


def test_parse_time_refuses_times_outside_utc() -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_time("0001-01-01T00:00:00+14:00")

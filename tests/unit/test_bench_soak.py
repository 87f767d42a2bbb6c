"""The chaos soak's schedule (bench/soak/schedule.py) and its refusals: the same seed draws the
same faults, so two runs can be compared by the schedule's digest; a fault kind it cannot inject
is refused before anything starts."""

from __future__ import annotations

import pytest

from bench.soak import run
from bench.soak.schedule import (
    KINDS,
    UsageError,
    digest,
    draw,
    fault_window,
    parse_kinds,
)


def test_the_same_seed_draws_the_same_schedule() -> None:
    kinds = parse_kinds(None, "postgresql")
    first, again = draw(7, 5, kinds), draw(7, 5, kinds)
    assert first == again and digest(first) == digest(again)
    assert digest(draw(8, 5, kinds)) != digest(first)
    # The order the kinds were typed in changes nothing.
    assert parse_kinds("pause,xid,nvlink", "sqlite") == parse_kinds("nvlink,xid,pause", "sqlite")


def test_the_first_round_fires_every_kind_once_xid_first_inside_the_window() -> None:
    kinds = parse_kinds(None, "postgresql")
    schedule = draw(1, 10, kinds)
    first = [p.kind for p in schedule[: len(kinds)]]
    assert first[0] == "xid" and sorted(first) == sorted(kinds)
    assert all(p.at < fault_window(10) for p in schedule)
    assert [p.at for p in schedule] == sorted(p.at for p in schedule)


def test_an_unknown_kind_is_refused_with_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert run.main(["--faults", "xid,meteor", "--minutes", "1"]) == 2
    err = capsys.readouterr().err
    assert "unknown fault kind 'meteor'" in err
    assert all(kind in err for kind in KINDS)


@pytest.mark.parametrize(
    ("faults", "db", "said"),
    [
        ("sxid", "postgresql", "nvl72"),
        ("maintenance", "postgresql", "--cloud aws"),
        ("db_outage", "sqlite", "needs --db postgresql"),
        (" , ", "postgresql", "names no kind"),
    ],
)
def test_kinds_this_setup_cannot_inject_are_refused(faults: str, db: str, said: str) -> None:
    with pytest.raises(UsageError, match=said):
        parse_kinds(faults, db)
    assert "db_outage" not in parse_kinds(None, "sqlite")

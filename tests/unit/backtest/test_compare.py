"""Comparing two replays and history: pairing, changes, hold episodes, breaker trips, reports."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from remediator.backtest import render
from remediator.backtest.compare import compare
from remediator.backtest.recording import RealRemediation
from remediator.backtest.replay import HeldAt, Opened, Replay, Trip

T0 = datetime(2026, 5, 1, tzinfo=UTC)
TOLERANCE = timedelta(minutes=1)


def opened(node: str, policy: str, minutes: float, ladder: tuple[str, ...] = ("cordon",)) -> Opened:
    at = T0 + timedelta(minutes=minutes)
    return Opened(node, policy, "p", at, ladder, False, True, f"{policy} on {node}", None)


def real(node: str, policy: str, minutes: float) -> RealRemediation:
    at = T0 + timedelta(minutes=minutes)
    return RealRemediation(
        node, policy, "p", at, at + timedelta(minutes=20), "succeeded", (), False
    )


def held(node: str, policy: str, minutes: float) -> HeldAt:
    return HeldAt(node, policy, T0 + timedelta(minutes=minutes), "max concurrent remediations (1)")


def run(baseline: Replay, proposed: Replay, history: list[RealRemediation]) -> dict[str, Any]:
    report = compare(
        baseline,
        proposed,
        history,
        since=T0,
        until=T0 + timedelta(days=2),
        tolerance=TOLERANCE,
    )
    body: dict[str, Any] = json.loads(render.to_json_text(report))
    return body


def test_differences_pair_by_node_and_time_and_name_what_changed() -> None:
    baseline = Replay(
        (opened("a", "hot", 10), opened("b", "xid", 30), opened("c", "hot", 50)), (), (), 0, 0
    )
    proposed = Replay(
        (
            opened("a", "hot", 4),  # earlier: changed (time)
            opened("b", "xid", 30, ("cordon", "drain")),  # changed (ladder)
            opened("d", "hot", 70),  # added
        ),
        (),
        (),
        0,
        0,
    )
    history = [real("a", "hot", 10), real("b", "xid", 30), real("c", "hot", 50)]
    body = run(baseline, proposed, history)
    assert [(i["node"], i["policy"]) for i in body["added"]] == [("d", "hot")]
    assert [(i["node"], i["policy"]) for i in body["removed"]] == [("c", "hot")]
    changed = {i["node"]: i["detail"] for i in body["changed"]}
    assert changed == {"a": "time -360s", "b": "ladder cordon → cordon→drain"}
    assert body["mismatches"] == []
    assert body["out_of_service"]["added"] == ["d"]
    assert body["per_policy"]["hot"] == {"added": 1, "removed": 1, "changed": 1}
    day = body["days"][0]
    assert (day["baseline"], day["proposed"], day["added"], day["removed"]) == (3, 3, 1, 1)


def test_history_not_reproduced_is_a_mismatch_both_ways() -> None:
    baseline = Replay((opened("a", "hot", 10), opened("b", "xid", 30)), (), (), 0, 0)
    history = [real("a", "hot", 12), real("b", "other", 30)]
    body = run(baseline, baseline, history)
    details = sorted((i["node"], i["detail"]) for i in body["mismatches"])
    assert details == [
        ("a", "happened (succeeded); the baseline replay did not open it"),
        ("a", "the baseline replay opened it; history has no such remediation"),
        ("b", "history decided policy other here"),
    ]


def test_holds_are_episodes_and_breaker_trips_that_move_are_shown() -> None:
    holds = tuple(held("n", "xid", m) for m in (0, 5, 10, 100))
    baseline = Replay((), (), (Trip(T0, "7 nodes"),), 0, 0)
    proposed = Replay((), holds, (), 0, 0)
    report = compare(
        baseline, proposed, [], since=T0, until=T0 + timedelta(days=1), tolerance=TOLERANCE
    )
    assert [(i.node, i.at) for i in report.holds_added] == [
        ("n", T0),
        ("n", T0 + timedelta(minutes=100)),
    ]
    assert "held 3 times" in report.holds_added[0].detail
    assert report.trips_changed
    markdown = render.to_markdown(report)
    assert "Budget holds added (2)" in markdown and "Breaker trips change" in markdown
    assert "| xid | 0 | 0 | 0 | 2 | 0 |" in markdown


def test_a_longer_wait_in_the_queue_is_a_change() -> None:
    now = opened("e", "xid", 90)
    before = replace(now, admitted_at=now.at)
    after = replace(now, admitted_at=now.at + timedelta(minutes=30))
    never = replace(now, admitted_at=None)
    body = run(Replay((before,), (), (), 0, 0), Replay((after,), (), (), 0, 0), [])
    assert [i["detail"] for i in body["changed"]] == ["admitted +1800s later than before"]
    assert body["changed"][0]["after"]["admitted"] == (now.at + timedelta(minutes=30)).isoformat()
    body = run(Replay((before,), (), (), 0, 0), Replay((never,), (), (), 0, 0), [])
    assert [i["detail"] for i in body["changed"]] == [
        "queued, still queued at the end of the record"
    ]


def test_a_hold_names_how_it_ended() -> None:
    """One hold, admitted ten minutes later: the report says when it was admitted, not
    "held 1 times until" the hold's own start."""
    at = T0 + timedelta(minutes=90)
    waited = replace(opened("e", "xid", 90), admitted_at=at + timedelta(minutes=10))
    report = compare(
        Replay((), (), (), 0, 0),
        Replay((waited,), (held("e", "xid", 90),), (), 0, 0),
        [],
        since=T0,
        until=T0 + timedelta(days=1),
        tolerance=TOLERANCE,
    )
    (item,) = report.holds_added
    assert item.detail == (
        f"held once at {at.isoformat()} (max concurrent remediations (1)); "
        f"admitted at {(at + timedelta(minutes=10)).isoformat()}"
    )

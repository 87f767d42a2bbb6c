"""The shadow report over records built in memory: what counts as fenced and for how long,
holds by cause, the breaker's trips in the window, real remediations left out, and each kind of
decision to look at."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from remediator.model.states import State
from remediator.shadow.report import build_report
from remediator.store.records import RemediationRecord
from tests.unit.web.builders import T0, event, record

REPLACE = ({"action": "cordon"}, {"action": "drain"}, {"action": "replace"})
REBOOT = ({"action": "cordon"}, {"action": "drain"}, {"action": "reboot"})
UNTIL = T0 + timedelta(days=1)


def fenced(
    rid: int, node: str, at: float, gpus: int | None = 8, **changes: Any
) -> RemediationRecord:
    quarantine = {"gpus": gpus} if gpus is not None else {}
    return record(
        State.SUCCEEDED,
        (
            event(1, at, None, State.DETECTED),
            event(2, at + 10, State.DETECTED, State.QUARANTINED),
            event(3, at + 20, State.QUARANTINED, State.DRAINING, detail=quarantine),
        ),
        id=rid,
        node=node,
        created_at=T0 + timedelta(seconds=at),
        finished_at=T0 + timedelta(seconds=at + 3610),
        dry_run=True,
        **changes,
    )


def test_counts_gpu_hours_holds_and_trips_of_the_dry_runs_only() -> None:
    records = [
        fenced(1, "a", 0, ladder=REPLACE),
        fenced(2, "b", 100, gpus=None, policy="thermal", pool="pool-b"),
        record(
            State.QUEUED,
            (event(1, 200, None, State.QUEUED, detail={"held": "storm breaker tripped"}),),
            id=3,
            node="c",
            created_at=T0 + timedelta(seconds=200),
            dry_run=True,
        ),
        # A replacement that really ran: 600 s cordoned, 1,200 s draining, 1,500 s replacing,
        # 300 s verifying, the durations the dry runs' GPU-hours are modelled from.
        record(
            State.SUCCEEDED,
            (
                event(1, 300, None, State.DETECTED),
                event(2, 300, State.DETECTED, State.QUARANTINED),
                event(3, 900, State.QUARANTINED, State.DRAINING),
                event(4, 2100, State.DRAINING, State.REPLACING),
                event(5, 3600, State.REPLACING, State.VERIFYING),
                event(6, 3900, State.VERIFYING, State.SUCCEEDED),
            ),
            id=4,
            node="d",
            created_at=T0 + timedelta(seconds=300),
            ladder=REPLACE,
        ),
    ]
    trips = [(T0 + timedelta(seconds=250), "4 nodes in 5m"), (T0 - timedelta(days=2), "old")]
    report = build_report(records, T0, UNTIL, trips)
    assert report.remediations == 3 and report.acted == 1
    assert report.by_policy == {"xid-79-fallen-off-bus": 2, "thermal": 1}
    assert report.by_pool == {"pool-a": 2, "pool-b": 1}
    assert report.fenced_nodes == ("a", "b")
    # Not the dry run's own seconds: 8 GPUs for the real replacement's 3,600 s = 8 GPU-hours.
    assert report.gpu_hours == 8.0 and report.gpu_hours_unknown == 1
    assert report.holds == {"breaker": 1}
    assert report.breaker_trips == ((T0 + timedelta(seconds=250), "4 nodes in 5m"),)


def test_each_kind_of_decision_to_look_at() -> None:
    records = [
        # a replace, then a repair on the same node later
        fenced(1, "a", 0, ladder=REPLACE),
        fenced(2, "a", 4000, ladder=REBOOT, code=48, xid_code=48),
        # a replace on a first XID 79 (catalog: reboot first)
        fenced(3, "b", 100, ladder=REPLACE),
        # a replace after an earlier fault of the node: not a first fault
        fenced(4, "c", 50, ladder=REBOOT),
        fenced(5, "c", 5000, ladder=REPLACE),
        # fenced three times
        *(fenced(10 + i, "d", 10000 + i * 5000) for i in range(3)),
    ]
    opted = fenced(20, "e", 300)
    would = {"dry_run_would_hold": "pod ml/eval opts out"}
    held = event(4, 330, State.DRAINING, None, detail=would)
    opted = replace(opted, events=(*opted.events, held))
    report = build_report([*records, opted], T0, UNTIL)
    found = {(d.remediation_id, d.kind) for d in report.disagreements}
    assert found == {
        (1, "replace-then-repair"),
        (3, "replace-on-first-fault"),
        (10, "flapping"),
        (20, "opt-out"),
    }
    assert [d.at for d in report.disagreements] == sorted(d.at for d in report.disagreements)

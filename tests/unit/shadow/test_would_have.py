"""What a dry-run ladder would have done given what really happened (#39 item 19): a fallback
`on_failure: replace` counts only when the repair would not have held, a remediation that exists
only because the dry run did not reset the GPU is a dry-run artefact, and GPU-hours are modelled
from real step durations or said to be unmodelled, never a silent 0."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from remediator.model.states import State
from remediator.shadow.report import build_report
from remediator.signals.model import Signal, SignalKind
from remediator.store.records import EventRecord, RemediationRecord
from tests.unit.web.builders import T0, event, record

RESET = (
    {"action": "cordon"},
    {"action": "drain"},
    {"action": "reset_gpu"},
    {"action": "diagnose"},
    {"action": "uncordon"},
    {"action": "replace", "fallback": True},
)
REBOOT = ({"action": "cordon"}, {"action": "drain"}, {"action": "reboot"})
WALK = (State.QUARANTINED, State.DRAINING, State.RESETTING_GPU, State.DIAGNOSING)
HOUR = 3600.0
UNTIL = T0 + timedelta(days=3)


def events(at: float, states: tuple[State, ...], seconds: tuple[float, ...]) -> list[EventRecord]:
    """DETECTED at `at`, then each of `states` after the matching `seconds`, then SUCCEEDED."""
    found = [event(1, at, None, State.DETECTED)]
    previous, now = State.DETECTED, at
    for index, (state, spent) in enumerate(zip((*states, State.UNCORDONING), seconds, strict=True)):
        detail = {"gpus": 8} if previous is State.QUARANTINED else None
        found.append(event(index + 2, now, previous, state, detail=detail))
        previous, now = state, now + spent
    found.append(event(len(found) + 1, now, previous, State.SUCCEEDED))
    return found


def xid(node: str, gpu: int, code: int) -> Signal:
    return Signal(node=node, kind=SignalKind.XID, source="dcgm", observed_at=T0, code=code, gpu=gpu)


def remap_pending(node: str, gpu: int) -> Signal:
    labels = {"code": "row-remap-pending", "source": "dcgm", "event_id": f"{node}-{gpu}"}
    return Signal(
        node=node,
        kind=SignalKind.MAINTENANCE,
        source="dcgm",
        observed_at=T0,
        code=21,
        gpu=gpu,
        labels=labels,
    )


def dry(
    rid: int, node: str, at: float, signal: Signal, ladder: Any = RESET, policy: str = "reset-62"
) -> RemediationRecord:
    """A dry run walks its ladder in seconds."""
    walked = events(at, WALK, (1.0, 1.0, 1.0, 1.0, 1.0))
    return record(
        State.SUCCEEDED,
        walked,
        id=rid,
        node=node,
        policy=policy,
        created_at=T0 + timedelta(seconds=at),
        finished_at=walked[-1].at,
        dry_run=True,
        signals=(signal,),
        xid_code=signal.code if signal.kind is SignalKind.XID else None,
        ladder=ladder,
    )


def real(rid: int, at: float) -> RemediationRecord:
    """A reset that really ran: 60 s cordon, 600 s drain, 300 s reset, 1,800 s diagnostics."""
    walked = events(at, WALK, (60.0, 600.0, 300.0, 1800.0, 10.0))
    return record(
        State.SUCCEEDED,
        walked,
        id=rid,
        node="r",
        created_at=T0 + timedelta(seconds=at),
        finished_at=walked[-1].at,
        ladder=RESET,
    )


def test_a_reset_whose_gpu_recovered_would_have_reset_not_replaced() -> None:
    records = [
        dry(1, "a", 0, xid("a", 2, 62)),
        # Two days later another fault of the node goes to a reboot: not a sign the reset failed.
        dry(2, "a", 2 * 86400, xid("a", 5, 79), REBOOT, "reboot-79"),
    ]
    report = build_report(records, T0, UNTIL)
    assert "replace" not in report.steps
    assert report.steps["reset_gpu"] == 1
    assert report.would_have == {"reset_gpu": 1, "reboot": 1}
    assert [d.kind for d in report.disagreements] == []
    verdict = next(v for v in report.verdicts if v.remediation_id == 1)
    assert verdict.action == "reset_gpu" and "no new fault" in verdict.why


def test_on_failure_replace_counts_when_the_gpu_faulted_again() -> None:
    records = [dry(3, "b", 0, xid("b", 1, 62)), dry(4, "b", 2 * HOUR, xid("b", 1, 62))]
    report = build_report(records, T0, UNTIL)
    first = next(v for v in report.verdicts if v.remediation_id == 3)
    assert first.action == "replace" and "#4" in first.why
    assert report.steps["replace"] == 1
    assert report.would_have == {"replace": 1, "reset_gpu": 1}


def test_a_row_remap_pending_a_reset_would_have_cleared_is_a_dry_run_artefact() -> None:
    records = [
        dry(5, "c", 0, xid("c", 3, 48)),
        dry(6, "c", HOUR, remap_pending("c", 3), REBOOT, "remap-pending"),
    ]
    report = build_report(records, T0, UNTIL)
    assert report.remediations == 1
    assert report.by_policy == {"reset-62": 1}
    assert report.would_have == {"reset_gpu": 1}  # the artefact is no sign the reset failed
    assert report.steps.get("reboot") is None
    (artefact,) = report.artefacts
    assert artefact.remediation_id == 6 and "#5" in artefact.what
    assert "dry-run artefacts: 1" in report.to_text()


def test_gpu_hours_come_from_real_step_durations_or_are_said_to_be_unmodelled() -> None:
    records = [
        real(10, -86400),
        dry(1, "a", 0, xid("a", 2, 62)),  # recovered: 60 + 600 + 300 + 1,800 + 10 s
        dry(3, "b", 0, xid("b", 1, 62)),  # faulted again: its replacement has no real history
        dry(4, "b", 2 * HOUR, xid("b", 1, 62)),
    ]
    report = build_report(records, T0, UNTIL)
    walked = 8 * 2770 / HOUR
    # #4 recovered as #1 did; #3 would have gone on to a replacement nothing real ever ran.
    assert report.gpu_hours == pytest.approx(2 * walked)
    assert report.gpu_hours_unmodelled == 1
    assert report.unmodelled_steps == ("replace", "verify")
    text = report.to_text()
    assert f"{2 * walked:.1f}" in text and "not modelled" in text and "replace" in text


def test_without_real_history_gpu_hours_cannot_be_modelled() -> None:
    report = build_report([dry(1, "a", 0, xid("a", 2, 62))], T0, UNTIL)
    assert report.gpu_hours is None and report.gpu_hours_unmodelled == 1
    assert report.to_json()["gpu_hours"] is None
    assert "cannot model" in report.to_text()

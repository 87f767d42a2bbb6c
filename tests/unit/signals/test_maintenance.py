from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from remediator.signals.dedup import SignalFolder
from remediator.signals.maintenance import (
    MaintenanceBook,
    MaintenanceEvent,
    MaintenanceOrigin,
    MaintenanceStatus,
)
from remediator.signals.model import Signal, SignalKind

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
HOUR = timedelta(hours=1)


def aws_event(**changes: object) -> MaintenanceEvent:
    values: dict[str, object] = {
        "event_id": "instance-event-0d59937288b749b32",
        "code": "system-reboot",
        "origin": MaintenanceOrigin.AWS,
        "instance_id": "i-0123456789abcdef0",
        "node": "gpu-node-1",
        "window_start": T0 + 48 * HOUR,
        "window_end": T0 + 50 * HOUR,
        "deadline": T0 + 72 * HOUR,
        "description": "The instance is scheduled for a reboot",
    }
    return MaintenanceEvent.model_validate(values | changes)


def test_the_signal_carries_the_event_and_reads_back() -> None:
    event = aws_event(can_reschedule=True)
    signal = event.signal("aws-maintenance", T0)
    assert signal.kind is SignalKind.MAINTENANCE
    assert signal.code == 2  # system-reboot
    assert signal.labels["code"] == "system-reboot"
    assert signal.labels["source"] == "aws"
    assert signal.labels["status"] == "scheduled"
    assert signal.labels["overdue"] == "false"
    assert signal.labels["deadline"] == (T0 + 72 * HOUR).isoformat()
    assert MaintenanceEvent.of(signal) == event


def test_a_stored_signal_round_trips_through_json() -> None:
    signal = aws_event().signal("aws-maintenance", T0)
    again = Signal.model_validate_json(signal.model_dump_json())
    assert MaintenanceEvent.of(again) == aws_event()


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"code": "reboot-now"}, "is not one of instance-reboot"),
        ({"origin": MaintenanceOrigin.GCE}, "gce maintenance code 'system-reboot'"),
        ({"window_end": T0}, "window_end is before window_start"),
        ({"window_start": datetime(2026, 3, 3)}, "timezone"),
        ({"event_id": ""}, "at least 1 character"),
        (
            {"origin": MaintenanceOrigin.DCGM, "code": "row-remap-pending"},
            "a DCGM row remap has no deadline",
        ),
    ],
)
def test_a_malformed_event_is_refused_with_the_reason(
    changes: dict[str, object], problem: str
) -> None:
    with pytest.raises(ValidationError, match=problem):
        aws_event(**changes)


def test_a_signal_that_is_not_an_event_says_so() -> None:
    other = Signal(node="gpu-node-1", kind=SignalKind.XID, source="x", observed_at=T0, code=79)
    with pytest.raises(ValueError, match="not a maintenance event"):
        MaintenanceEvent.of(other)
    broken = aws_event().signal("aws", T0)
    broken = broken.model_copy(update={"labels": {**broken.labels, "status": "maybe"}})
    with pytest.raises(ValueError, match="maintenance signal on gpu-node-1"):
        MaintenanceEvent.of(broken)


def test_an_event_past_its_deadline_is_overdue_until_it_ends() -> None:
    event = aws_event()
    assert not event.overdue(T0)
    assert event.overdue(T0 + 72 * HOUR)
    assert event.signal("aws", T0 + 73 * HOUR).labels["overdue"] == "true"
    assert not aws_event(status=MaintenanceStatus.COMPLETED).overdue(T0 + 73 * HOUR)
    dcgm = MaintenanceEvent(
        event_id="gpu-node-1/gpu3/row-remap-pending",
        code="row-remap-pending",
        origin=MaintenanceOrigin.DCGM,
        instance_id="GPU-1111",
        node="gpu-node-1",
        gpu=3,
    )
    assert not dcgm.overdue(T0 + 1000 * HOUR)


def test_one_signal_per_event_per_poll_updated_when_rescheduled() -> None:
    book = MaintenanceBook("aws-maintenance")
    first = book.update([aws_event(), aws_event()], T0)
    assert [s.labels["status"] for s in first] == ["scheduled"]
    assert first[0].since == T0
    same = book.update([aws_event()], T0 + HOUR)
    assert [s.labels["status"] for s in same] == ["scheduled"]
    assert same[0].since == T0  # the same event since it was first seen
    moved = aws_event(window_start=T0 + 60 * HOUR, window_end=T0 + 62 * HOUR)
    later = book.update([moved], T0 + 2 * HOUR)
    assert len(later) == 1
    assert later[0].labels["status"] == "rescheduled"
    assert later[0].labels["window_start"] == (T0 + 60 * HOUR).isoformat()
    # Still rescheduled on the next poll, though the window did not change again.
    assert book.update([moved], T0 + 3 * HOUR)[0].labels["status"] == "rescheduled"
    assert len(book) == 1


def test_a_completed_event_ends_once_and_stays_ended() -> None:
    book = MaintenanceBook("aws-maintenance")
    book.update([aws_event()], T0)
    done = aws_event(status=MaintenanceStatus.COMPLETED, description="[Completed] reboot")
    ended = book.update([done], T0 + HOUR)
    assert [s.labels["status"] for s in ended] == ["completed"]
    assert len(book) == 0
    # EC2 describes a completed event for a week: it is not news again.
    assert book.update([done], T0 + 2 * HOUR) == []
    # Neither is a scheduled version of the same id read late (a stale replica's answer).
    assert book.update([aws_event()], T0 + 3 * HOUR) == []


def test_a_cancelled_event_ends_and_one_never_opened_is_not_news() -> None:
    book = MaintenanceBook("aws-maintenance")
    book.update([aws_event()], T0)
    cancelled = book.update([aws_event(status=MaintenanceStatus.CANCELLED)], T0 + HOUR)
    assert [s.labels["status"] for s in cancelled] == ["cancelled"]
    other = aws_event(event_id="instance-event-1", status=MaintenanceStatus.COMPLETED)
    assert book.update([other], T0 + HOUR) == []


def test_an_event_no_longer_reported_ends_as_the_source_says_and_may_come_back() -> None:
    book = MaintenanceBook("gce-maintenance")
    book.update([aws_event()], T0)
    gone = book.update([], T0 + HOUR, vanished=MaintenanceStatus.COMPLETED)
    assert [s.labels["status"] for s in gone] == ["completed"]
    assert book.update([], T0 + 2 * HOUR) == []
    back = book.update([aws_event()], T0 + 3 * HOUR)
    assert [s.labels["status"] for s in back] == ["scheduled"]
    assert back[0].since == T0 + 3 * HOUR


def test_events_are_never_folded_away() -> None:
    folder = SignalFolder(timedelta(minutes=10))
    book = MaintenanceBook("aws-maintenance")
    two = [aws_event(), aws_event(event_id="instance-event-2", code="instance-retirement")]
    assert len(folder.fold(book.update(two, T0), T0)) == 2
    assert len(folder.fold(book.update(two, T0 + timedelta(minutes=1)), T0)) == 2


def test_dcgm_row_remaps_pending_are_one_event_per_gpu() -> None:
    from remediator.signals.sources.prometheus import (
        Mapped,
        PrometheusSourceConfig,
        row_remaps_pending,
    )

    config = PrometheusSourceConfig(url="http://prometheus.invalid")
    series = [
        {"metric": {"Hostname": "gpu-node-1", "gpu": "3", "UUID": "GPU-aaaa"}, "value": [0, "1"]},
        {"metric": {"Hostname": "gpu-node-2", "gpu": "0"}, "value": [0, "1"]},
        {"metric": {"gpu": "1"}, "value": [0, "1"]},
        {"metric": {"Hostname": "Not_A_Node", "gpu": "1"}, "value": [0, "1"]},
    ]
    out = Mapped()
    events = row_remaps_pending(series, config, out)
    assert [(e.node, e.gpu, e.event_id) for e in events] == [
        ("gpu-node-1", 3, "GPU-aaaa/row-remap-pending"),
        ("gpu-node-2", 0, "gpu-node-2/gpu0/row-remap-pending"),
    ]
    assert all(e.origin is MaintenanceOrigin.DCGM and e.deadline is None for e in events)
    assert out.skipped == 2
    book = MaintenanceBook("prometheus")
    assert len(book.update(events, T0)) == 2
    # The reset cleared GPU 3's pending remap: its event ends once.
    cleared = book.update(events[1:], T0 + HOUR)
    assert [(s.node, s.labels["status"]) for s in cleared] == [
        ("gpu-node-2", "scheduled"),
        ("gpu-node-1", "completed"),
    ]

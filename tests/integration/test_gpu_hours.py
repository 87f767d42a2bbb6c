"""GPU-hours out of service: the GPUs the quarantine counted on the node, times the time from
the quarantine until the node (or its replacement) is back, or until now while it is still
out; per policy in the API and per day and policy on the overview."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, time, timedelta

import pytest
from fastapi.testclient import TestClient

from remediator.model.states import State
from remediator.signals.model import SignalKind
from remediator.web import views
from tests.fixtures.web import READONLY_TOKEN, Console, Seeder

pytestmark = pytest.mark.integration

READONLY = {"Authorization": f"Bearer {READONLY_TOKEN}"}


@pytest.fixture
def client(console: Console) -> Iterator[TestClient]:
    with TestClient(console.app) as test_client:
        yield test_client


def _quarantined(console: Console, node: str, policy: str, gpus: int | None) -> int:
    seeder = Seeder(console)
    rid = seeder.create(node, policy, SignalKind.XID, 79)
    repo = console.repository
    repo.transition(rid, State.DETECTED, State.QUARANTINED, action="started", actor="c")
    console.clock.advance(60)
    repo.transition(
        rid,
        State.QUARANTINED,
        State.DRAINING,
        action="quarantine_done",
        actor="c",
        detail={"result": "quarantined", "gpus": gpus, "node": node},
    )
    return rid


def test_gpu_hours_per_policy_from_quarantine_to_back_in_service(
    client: TestClient, console: Console
) -> None:
    start = console.clock.now()
    done = _quarantined(console, "gpu-node-20", "xid-79-fallen-off-bus", 8)
    still_out = _quarantined(console, "gpu-node-21", "gpu-overheat", 4)
    unknown = _quarantined(console, "gpu-node-22", "gpu-overheat", None)
    repo = console.repository
    console.clock.advance(3600 - 180)
    # The first is back in service one hour after its quarantine.
    for before, after in ((State.DRAINING, State.REPLACING), (State.REPLACING, State.VERIFYING)):
        repo.transition(done, before, after, action=after.value, actor="c")
    repo.transition(done, State.VERIFYING, State.SUCCEEDED, action="verify_done", actor="c")
    console.clock.advance(1800)

    spans = {s.remediation_id: s for s in repo.quarantine_spans(since=start)}
    assert set(spans) == {done, still_out, unknown}
    now = console.clock.now()
    assert views.gpu_hours(spans[done], now) == pytest.approx(8.0)
    # Still out: four GPUs from its quarantine (one minute after the first) until now.
    assert views.gpu_hours(spans[still_out], now) == pytest.approx(4 * (3600 - 60 + 1800) / 3600)
    assert views.gpu_hours(spans[unknown], now) is None

    body = client.get("/api/v1/overview", headers=READONLY).json()
    by_policy = body["gpu_hours_out_of_service_by_policy"]
    assert by_policy["xid-79-fallen-off-bus"] == pytest.approx(8.0)
    assert by_policy["gpu-overheat"] == pytest.approx(4 * 5340 / 3600, abs=1e-3)
    page = client.get("/", headers=READONLY).text
    section = page[page.index('id="gpu-hours"') :]
    assert "8.0 GPU-h" in section and "5.9 GPU-h" in section
    assert "more whose node reported no GPU count (left out)" in section
    assert "n=" in page  # time to repair shows its sample size


def test_the_page_counts_the_days_it_charts_and_the_api_its_fourteen_days_from_one_read(
    client: TestClient, console: Console
) -> None:
    """A quarantine 13.5 days old began before the chart's first day (midnight 13 days back) but
    inside the API's 14 days: the summary counts it, the page's chart and table do not."""
    noon = console.clock.now().replace(hour=12, minute=0, second=0, microsecond=0)
    console.clock.advance((noon + timedelta(days=1) - console.clock.now()).total_seconds())
    old = _quarantined(console, "gpu-node-40", "gpu-overheat", 8)
    began = console.clock.now()
    console.repository.transition(
        old, State.DRAINING, State.SUCCEEDED, action="uncordoned", actor="c"
    )
    after_midnight = datetime.combine(began.date() + timedelta(days=14), time(0, 30), UTC)
    console.clock.advance((after_midnight - began).total_seconds())
    _quarantined(console, "gpu-node-41", "xid-79-fallen-off-bus", 4)
    console.clock.advance(3600 - 60)

    body = client.get("/api/v1/overview", headers=READONLY).json()
    assert set(body["gpu_hours_out_of_service_by_policy"]) == {
        "gpu-overheat",
        "xid-79-fallen-off-bus",
    }
    page = client.get("/", headers=READONLY).text
    section = page[page.index('id="gpu-hours"') :]
    section = section[: section.index("</table>")]
    assert "xid-79-fallen-off-bus" in section and "4.0 GPU-h" in section
    assert "gpu-overheat" not in section


def test_gpu_hours_lost_is_summed_per_day_and_policy() -> None:
    from remediator.store.records import QuarantineSpan

    t0 = datetime(2026, 3, 1, 23, 0, tzinfo=UTC)
    spans = [
        QuarantineSpan(1, "a", "n1", t0, 8, t0 + timedelta(hours=2)),
        QuarantineSpan(2, "a", "n2", t0 + timedelta(hours=2), 8, None),
        QuarantineSpan(3, "b", "n3", t0, None, None),
    ]
    lost = views.gpu_hours_lost(spans, t0 + timedelta(hours=3))
    assert lost.by_day == {t0.date(): {"a": 16.0}, (t0 + timedelta(hours=2)).date(): {"a": 8.0}}
    assert lost.by_policy == {"a": 24.0}
    assert (lost.counted, lost.unknown) == (2, 1)


def test_disrupted_gpu_hours_per_remediation_and_per_policy(
    client: TestClient, console: Console
) -> None:
    """Two 8-GPU training pods evicted by the drain: one's replacement ran 30 minutes later,
    the other (no owner) counts until the remediation ended, an hour after its eviction."""
    start = console.clock.now()
    rid = _quarantined(console, "gpu-node-30", "xid-79-fallen-off-bus", 8)
    repo = console.repository
    evicted_at = console.clock.now()
    stamp = evicted_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    owner = {"kind": "Job", "name": "llama", "uid": "job-1"}
    repo.append_event(
        rid,
        action="progress",
        actor="c",
        detail={
            "pods": [
                {"pod": "train/w0", "uid": "u0", "gpus": 8, "owner": owner},
                {"pod": "train/bare", "uid": "u1", "gpus": 8, "unmanaged": True},
            ]
        },
    )
    repo.append_event(
        rid,
        action="progress",
        actor="c",
        detail={
            "pods": [
                {
                    "pod": "train/w0",
                    "uid": "u0",
                    "gpus": 8,
                    "owner": owner,
                    "state": "evicted",
                    "sigterm_at": stamp,
                },
                {
                    "pod": "train/bare",
                    "uid": "u1",
                    "gpus": 8,
                    "unmanaged": True,
                    "state": "evicted",
                    "sigterm_at": stamp,
                },
            ]
        },
    )
    # While open: both count until now.
    console.clock.advance(600)
    body = client.get(f"/api/v1/remediations/{rid}", headers=READONLY).json()
    assert body["gpu_hours_disrupted"] == pytest.approx(2 * 8 * 600 / 3600, abs=1e-3)
    assert body["gpu_hours_out_of_service"] == pytest.approx(8 * 660 / 3600, abs=1e-3)

    console.clock.advance(3000)
    rescheduled = (evicted_at + timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for before, after in ((State.DRAINING, State.REPLACING), (State.REPLACING, State.VERIFYING)):
        repo.transition(rid, before, after, action=after.value, actor="c")
    repo.transition(
        rid,
        State.VERIFYING,
        State.SUCCEEDED,
        action="verify_done",
        actor="c",
        detail={
            "disrupted": [
                {
                    "pod": "train/w0",
                    "uid": "u0",
                    "gpus": 8,
                    "owner_uid": "job-1",
                    "evicted_at": stamp,
                    "rescheduled_at": rescheduled,
                },
                {
                    "pod": "train/bare",
                    "uid": "u1",
                    "gpus": 8,
                    "owner_uid": None,
                    "evicted_at": stamp,
                    "rescheduled_at": None,
                },
            ]
        },
    )
    console.clock.advance(7200)  # long after the end: nothing more is counted
    body = client.get(f"/api/v1/remediations/{rid}", headers=READONLY).json()
    assert body["gpu_hours_disrupted"] == pytest.approx(8 * 0.5 + 8 * 1.0)
    (span,) = [s for s in repo.quarantine_spans(since=start) if s.remediation_id == rid]
    assert views.disrupted_gpu_hours(span, console.clock.now()) == pytest.approx(12.0)

    overview = client.get("/api/v1/overview", headers=READONLY).json()
    assert overview["gpu_hours_disrupted_by_policy"] == {"xid-79-fallen-off-bus": 12.0}
    page = client.get("/", headers=READONLY).text
    section = page[page.index('id="gpu-hours"') :]
    assert "GPU-hours of workload disrupted per day" in section
    assert "12.0 GPU-h" in section
    detail = client.get(f"/remediations/{rid}", headers=READONLY).text
    assert "12.0 GPU-h of workload disrupted" in detail

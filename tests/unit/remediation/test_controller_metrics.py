"""The controller's gauges and counters, fed with records as the store hands them out."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from remediator.controller.metrics import ControllerMetrics, closing_outcome
from remediator.model.states import State
from remediator.remediation.service import TransitionSeen
from remediator.store.records import ControllerStatus, EventRecord, RemediationRecord

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)


def record(rid: int, state: State, entered: datetime, policy: str = "xid-79") -> Any:
    fields: dict[str, Any] = dict.fromkeys(RemediationRecord.__dataclass_fields__)
    event = EventRecord(1, rid, entered, None, state, "moved", {}, "controller")
    fields.update(
        id=rid,
        node=f"n{rid}",
        state=state,
        policy=policy,
        signal_kind="xid",
        created_at=entered - timedelta(hours=5),
        events=(event,),
    )
    return RemediationRecord(**fields)


def test_gauges_count_states_and_age_the_oldest_by_time_in_state() -> None:
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    fencing = [
        record(1, State.DRAINING, NOW - timedelta(minutes=40)),
        record(2, State.DRAINING, NOW - timedelta(minutes=10)),
        record(3, State.FAILED, NOW - timedelta(minutes=5)),
    ]
    status = ControllerStatus("c", paused=True, breaker_tripped=True)
    metrics.refresh(fencing, status, NOW)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("remediator_remediations", state="draining") == 2
    assert value("remediator_remediations", state="failed") == 1
    assert value("remediator_remediations", state="replacing") == 0
    assert value("remediator_oldest_open_remediation_seconds", state="draining") == 2400
    assert value("remediator_oldest_open_remediation_seconds", state="replacing") == 0
    assert value("remediator_paused") == 1 and value("remediator_breaker_tripped") == 1

    metrics.refresh([fencing[0], fencing[2]], ControllerStatus("c"), NOW)
    assert value("remediator_paused") == 0
    assert value("remediator_remediations", state="draining") == 1


def test_transitions_feed_the_step_histogram_and_the_outcomes() -> None:
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    before = record(1, State.VERIFYING, NOW)
    after = record(1, State.SUCCEEDED, NOW)
    metrics.transition(TransitionSeen(before, after, 12.5))
    metrics.closed(State.VERIFYING, after)
    metrics.opened([before])
    metrics.closed(State.DRAINING, record(2, State.CANCELLED, NOW, policy="thermal"))
    metrics.policy_set("abc", "f00")
    metrics.policy_set(None, "f01")

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("remediator_step_duration_seconds_sum", step="verify") == 12.5
    assert value("remediator_step_duration_seconds_count", step="drain") == 0
    assert value("remediator_remediations_finished_total", outcome="succeeded", policy="xid-79")
    assert value("remediator_remediations_finished_total", outcome="cancelled", policy="thermal")
    assert value("remediator_remediations_started_total", policy="xid-79", signal_kind="xid")
    assert value("remediator_policy_set_info", commit="", hash="f01") == 1
    assert value("remediator_policy_set_info", commit="abc", hash="f00") is None


def test_succeeded_remediations_count_by_outcome() -> None:
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    before = record(1, State.UNCORDONING, NOW - timedelta(minutes=1))
    repaired = replace(record(1, State.SUCCEEDED, NOW), outcome="repaired")
    metrics.transition(TransitionSeen(before, repaired, 2.0))
    metrics.closed(State.UNCORDONING, repaired)
    verifying = record(2, State.VERIFYING, NOW - timedelta(minutes=1))
    replaced = replace(record(2, State.SUCCEEDED, NOW), outcome="replaced")
    metrics.transition(TransitionSeen(verifying, replaced, 2.0))
    metrics.closed(State.VERIFYING, replaced)
    metrics.transition(TransitionSeen(before, record(3, State.REBOOTING, NOW), 1.0))

    def resolved(outcome: str) -> float | None:
        labels = {"outcome": outcome, "policy": "xid-79"}
        return registry.get_sample_value("remediator_remediations_resolved_total", labels)

    assert resolved("repaired") == 1 and resolved("replaced") == 1
    step = {"step": "uncordon"}
    assert registry.get_sample_value("remediator_step_duration_seconds_count", step) == 2


def test_each_validation_counts_by_pool_model_provider_and_result() -> None:
    """From the transition's own line: the record the store hands back may carry no events (the
    real CLI test found the counter empty when it read them from `after`)."""
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    before = record(1, State.VALIDATING, NOW)
    after = replace(record(1, State.REPLACING, NOW), events=())
    detail = {
        "pool": "h100-train",
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "provider": "aws",
        "new_machine": True,
        "checks": [{"check": "dcgm", "passed": False, "seconds": 2.5}],
    }
    metrics.transition(TransitionSeen(before, after, 5.0, "validate_failed", detail))
    labels = {
        "pool": "h100-train",
        "gpu_model": "NVIDIA H100 80GB HBM3",
        "provider": "aws",
        "new_machine": "true",
        "result": "failed",
    }
    assert registry.get_sample_value("remediator_validations_total", labels) == 1
    check = {"check": "dcgm"}
    assert registry.get_sample_value("remediator_validation_check_seconds_sum", check) == 2.5


def test_an_outcome_is_counted_once_when_the_remediation_closes() -> None:
    """Issue 39 item 13: failed, retried, failed again, then its pool replaced the node itself
    (succeeded/replaced): one outcome, succeeded. A failure counts when the remediation closes
    from failed without success (a cancel, its node gone)."""
    registry = CollectorRegistry()
    metrics = ControllerMetrics(registry)
    replacing = record(1, State.REPLACING, NOW)
    failed = record(1, State.FAILED, NOW)
    for _ in range(2):  # the failure, and again after the on-call retry
        metrics.transition(TransitionSeen(replacing, failed, 3.0, "replacement_failed"))
    healed = replace(record(1, State.SUCCEEDED, NOW), outcome="replaced")
    metrics.closed(State.FAILED, healed)
    metrics.closed(State.FAILED, record(2, State.CANCELLED, NOW))
    metrics.closed(State.QUEUED, record(3, State.CANCELLED, NOW))

    def finished(outcome: str) -> float | None:
        labels = {"outcome": outcome, "policy": "xid-79"}
        return registry.get_sample_value("remediator_remediations_finished_total", labels)

    assert (finished("succeeded"), finished("failed"), finished("cancelled")) == (1, 1, 1)
    resolved = {"outcome": "replaced", "policy": "xid-79"}
    assert registry.get_sample_value("remediator_remediations_resolved_total", resolved) == 1
    assert closing_outcome(State.REPLACING, State.FAILED) is None

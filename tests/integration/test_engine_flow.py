"""XID 79 end to end: the simulated DCGM exporter reports it, the real Prometheus scrapes it, the
controller (in-process, its real jobs running) quarantines the node, asks for checkpoints, drains
it through the inference PodDisruptionBudgets with the policy's grace period, asks the node pool
for one replacement, sees the new node Ready and closes the remediation with its full timeline.
On SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from remediator.controller.app import Controller
from remediator.model.disruption import disrupted_gpu_hours
from remediator.model.states import State
from remediator.signals.model import SignalKind
from remediator.web import views
from tests.fixtures.prometheus import PrometheusHandle
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import Engine, settings_for, write_policies

pytestmark = pytest.mark.integration

NODE, POOL = "a100-infer-0000", "a100-infer"
DRAIN_GRACE = 3


@pytest.fixture
def engine(
    sim_factory: Callable[..., SimHandle],
    prometheus_factory: Callable[..., PrometheusHandle],
    migrated_database_url: str,
    tmp_path: Path,
) -> Iterator[Engine]:
    sim = sim_factory(nodes=8, provision_delay=1.0)
    prometheus = prometheus_factory([sim.metrics_url], scrape_interval="1s")
    policies = write_policies(tmp_path / "policies", drain_grace=DRAIN_GRACE)
    settings = settings_for(sim, migrated_database_url, policies, prometheus_url=prometheus.url)
    controller = Controller(settings)  # the default sources: node conditions and Prometheus
    controller.start(serve_web=False)
    handle = Engine(sim, controller)
    yield handle
    handle.close()


def test_xid_79_is_remediated_end_to_end(engine: Engine) -> None:
    spare_before = engine.spare(POOL)
    evictable = {
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in engine.pods_on(NODE)
        if p["metadata"]["namespace"] == "inference"
    }
    assert evictable, "the node runs inference replicas under PodDisruptionBudgets"

    engine.fault({"type": "xid", "node": NODE, "gpu": 3, "code": 79})
    done = engine.wait_state(NODE, State.SUCCEEDED, State.FAILED, State.HELD, timeout=90)
    assert done.state is State.SUCCEEDED, done.error or done.hold_reason

    # The path, step by step, each transition written down.
    moves = [(e.from_state, e.to_state) for e in done.events if e.to_state is not None]
    assert moves == [
        (None, State.DETECTED),
        (State.DETECTED, State.QUARANTINED),
        (State.QUARANTINED, State.CHECKPOINTING),
        (State.CHECKPOINTING, State.DRAINING),
        (State.DRAINING, State.REPLACING),
        (State.REPLACING, State.VERIFYING),
        (State.VERIFYING, State.SUCCEEDED),
    ]
    assert all(e.actor == engine.controller.actor for e in done.events)
    assert done.signals[0].kind is SignalKind.XID and done.signals[0].code == 79
    assert done.signals[0].gpu == 3 and done.signals[0].source == "prometheus"
    assert done.reason.startswith("xid-79: xid 79 on GPU 3")

    # Drained through the budgets: some eviction was refused (429) and retried.
    progress = [e.detail for e in done.events if e.action == "progress"]
    pod_states = [p.get("state") for d in progress for p in d.get("pods", [])]
    assert "blocked" in pod_states, progress

    # Each evicted pod's GPUs were recorded, and the end checked which replacements run: the
    # disrupted GPU-hours count each until its replacement ran (or until the end).
    (last,) = [e for e in done.events if e.to_state is State.SUCCEEDED]
    disrupted = {d["pod"]: d for d in last.detail["disrupted"]}
    assert evictable <= set(disrupted), last.detail
    assert all(d["gpus"] >= 1 and d["owner_uid"] for d in disrupted.values())
    span = views.record_span(done)
    assert span is not None and done.finished_at is not None
    assert {e.pod for e in span.evictions} == set(disrupted)
    hours = views.disrupted_gpu_hours(span, done.finished_at + timedelta(days=1))
    # (It may be zero: the API's times are whole seconds, and a simulated ReplicaSet's
    # replacement can be Ready within the second of its eviction.)
    assert hours == pytest.approx(disrupted_gpu_hours(span.evictions, done.finished_at))
    for e in span.evictions:
        assert e.rescheduled_at is None or e.evicted_at <= e.rescheduled_at <= done.finished_at

    # Each evicted pod got its SIGTERM within the policy's one grace (the kubelet's Events): the
    # first at once with the whole of it, those a budget held later with the rest of the clock.
    killing = engine.sim.kubectl(
        "get",
        "events",
        "-n",
        "inference",
        "--field-selector",
        "reason=Killing",
        "-o",
        "jsonpath={range .items[*]}{.involvedObject.name}|{.message}{'\\n'}{end}",
    )
    sigterm = {
        line.split("|")[0]
        for line in killing.splitlines()
        if "sending SIGTERM" in line
        and 1 <= int(line.split("grace period ")[1].split("s")[0]) <= DRAIN_GRACE
    }
    assert {key.split("/")[1] for key in evictable} <= sigterm, killing

    # One replacement, a Ready new node, the old one gone.
    assert engine.spare(POOL) == spare_before - 1
    assert done.new_node and done.replacement_operation_id
    new = engine.node(done.new_node)
    assert new is not None and new["metadata"]["labels"]["simcloud.io/nodepool"] == POOL
    ready = [c for c in new["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True" and not new["spec"].get("unschedulable")
    assert engine.node(NODE) is None

    # The signal is on the node's record, tied to the remediation.
    history = engine.repository.node_history(NODE)
    assert [r.id for r in history.remediations] == [done.id]
    assert any(s.remediation_id == done.id for s in history.signals)

    # The metrics saw every step.
    engine.controller.refresh_metrics()
    registry = engine.controller.registry
    assert (
        registry.get_sample_value(
            "remediator_remediations_finished_total", {"outcome": "succeeded", "policy": "xid-79"}
        )
        == 1
    )
    assert (
        registry.get_sample_value(
            "remediator_remediations_started_total", {"policy": "xid-79", "signal_kind": "xid"}
        )
        == 1
    )
    for step in ("quarantine", "checkpoint", "drain", "replace", "verify"):
        count = registry.get_sample_value("remediator_step_duration_seconds_count", {"step": step})
        assert count == 1, step
    assert registry.get_sample_value("remediator_source_up", {"source": "prometheus"}) == 1
    assert registry.get_sample_value("remediator_is_leader") == 1

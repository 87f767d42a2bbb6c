"""The agents' series are written as exposition text by hand (20,000 of them at 10,000 agents
cost ~90 ms a scrape through prometheus_client): Prometheus's own parser must read it back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from remediator.controller.metrics import ControllerMetrics
from remediator.model.agent_liveness import AgentPod, Judge
from remediator.store.records import AgentStatus

NOW = datetime(2026, 12, 2, tzinfo=UTC)


def judge(**pods: AgentPod) -> Judge:
    return Judge(
        NOW,
        silent_after=timedelta(seconds=60),
        not_ready_after=timedelta(seconds=30),
        sights=pods,
        watching=bool(pods),
    )


def parsed(metrics: ControllerMetrics) -> dict[tuple[str, str | None], float]:
    text = metrics.agents_exposition().decode()
    return {
        (sample.name, sample.labels.get("node")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_each_agent_is_up_or_silent_with_its_age_and_odd_names_are_escaped() -> None:
    metrics = ControllerMetrics(CollectorRegistry())
    odd = 'gpu"node\\7\nb'
    statuses = (
        AgentStatus("gpu-node-1", "a", "1", NOW, NOW - timedelta(seconds=12.5)),
        AgentStatus(odd, "a", "1", NOW, NOW - timedelta(seconds=90)),
    )
    metrics.agents(statuses, judge())
    assert parsed(metrics) == {
        ("remediator_agent_up", "gpu-node-1"): 1.0,
        ("remediator_agent_up", odd): 0.0,
        ("remediator_agent_heartbeat_age_seconds", "gpu-node-1"): 12.5,
        ("remediator_agent_heartbeat_age_seconds", odd): 90.0,
        ("remediator_agents_silent", None): 1.0,
    }


def test_before_any_snapshot_only_the_count_is_written() -> None:
    assert parsed(ControllerMetrics(CollectorRegistry())) == {
        ("remediator_agents_silent", None): 0.0
    }


def test_an_agent_pod_decides_up_whatever_its_heartbeat_says() -> None:
    """A crash-looping pod is down though its last heartbeat is recent; a Ready pod that has
    not sent one yet is up, with no age."""
    metrics = ControllerMetrics(CollectorRegistry())
    statuses = (AgentStatus("gpu-node-1", "a", "1", NOW, NOW - timedelta(seconds=5)),)
    looping = AgentPod("remediator/agent-a", False, NOW, 3, waiting="CrashLoopBackOff")
    fresh = AgentPod("remediator/agent-b", True, NOW - timedelta(seconds=3), 0)
    metrics.agents(statuses, judge(**{"gpu-node-1": looping, "gpu-node-2": fresh}))
    assert parsed(metrics) == {
        ("remediator_agent_up", "gpu-node-1"): 0.0,
        ("remediator_agent_up", "gpu-node-2"): 1.0,
        ("remediator_agent_heartbeat_age_seconds", "gpu-node-1"): 5.0,
        ("remediator_agents_silent", None): 1.0,
    }

"""The controller's side of the node agent: the push-only role, heartbeats, and silent agents
shown as unknown on the console, the API and /metrics."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from remediator.controller.metrics import ControllerMetrics
from remediator.kube.agent_pods import AgentPods, liveness_judge
from remediator.kube.client import KubeClient
from remediator.model.agent_liveness import PodGone
from remediator.settings import AgentIntakeSettings
from tests.fixtures.sim import SimHandle
from tests.fixtures.web import (
    OPERATOR_TOKEN,
    PUSH_TOKEN,
    READONLY_TOKEN,
    START,
    Console,
    seeded,
)

pytestmark = pytest.mark.integration

PUSH = {"Authorization": f"Bearer {PUSH_TOKEN}"}
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
READER = {"Authorization": f"Bearer {READONLY_TOKEN}"}


@pytest.fixture
def console(sqlite_head_template: Path, tmp_path: Path) -> Iterator[Console]:
    path = tmp_path / "console.db"
    shutil.copyfile(sqlite_head_template, path)
    with seeded(f"sqlite:///{path}") as built:
        yield built


def _signal(console: Console, node: str = "gpu-node-01") -> dict[str, Any]:
    return {
        "node": node,
        "kind": "xid",
        "source": "agent",
        "observed_at": console.clock.now().isoformat(),
        "gpu": 1,
        "code": 79,
    }


def _heartbeat(node: str = "gpu-node-01") -> dict[str, Any]:
    return {
        "node": node,
        "agent": "agent-abc",
        "version": "0.1.0",
        "started_at": START.isoformat(),
        "stats": {"records_read": 10, "records_skipped": 1},
    }


def test_push_only_token_posts_signals_and_heartbeats(console: Console) -> None:
    client = TestClient(console.app)
    answer = client.post("/api/v1/signals", json=[_signal(console)], headers=PUSH)
    assert answer.status_code == 202, answer.text
    assert [s.node for s in console.deps.inbox.drain()] == ["gpu-node-01"]
    answer = client.post("/api/v1/agents/heartbeat", json=_heartbeat(), headers=PUSH).json()
    # A small fleet is within the heartbeat budget at any period: the agent keeps its own 10 s.
    assert 0 <= answer.pop("next_heartbeat_seconds") < 10
    assert answer == {"recorded": True, "silent_after_seconds": 60.0, "send_hardware": False}
    assert client.post("/api/v1/alertmanager", json={}, headers=PUSH).status_code == 422


def test_push_only_token_cannot_act_or_read(console: Console) -> None:
    client = TestClient(console.app)
    rid = console.ids["approval"]
    for command in ("approve", "release", "cancel", "retry"):
        answer = client.post(f"/api/v1/remediations/{rid}/{command}", json={}, headers=PUSH)
        assert answer.status_code == 403, (command, answer.text)
        assert "push-only" in answer.json()["reason"]
    for command in ("pause", "resume", "reset-breaker"):
        answer = client.post(f"/api/v1/controller/{command}", json={"reason": "try"}, headers=PUSH)
        assert answer.status_code == 403, (command, answer.text)
    assert client.get("/api/v1/remediations", headers=PUSH).status_code == 403
    assert client.get("/api/v1/agents", headers=PUSH).status_code == 403
    assert console.repository.get(rid).state.value == "awaiting_approval"  # type: ignore[union-attr]
    assert not console.repository.controller_status().paused
    # Nor can it log in to the console and ride a cookie.
    login = client.post("/login", data={"token": PUSH_TOKEN}, follow_redirects=False)
    assert login.status_code == 401


def test_readers_cannot_push_and_operators_still_can(console: Console) -> None:
    client = TestClient(console.app)
    assert (
        client.post("/api/v1/signals", json=[_signal(console)], headers=READER).status_code == 403
    )
    assert (
        client.post("/api/v1/signals", json=[_signal(console)], headers=OPERATOR).status_code == 202
    )
    heartbeat = client.post("/api/v1/agents/heartbeat", json=_heartbeat(), headers=READER)
    assert heartbeat.status_code == 403
    assert client.post("/api/v1/signals", json=[_signal(console)]).status_code == 401


def test_heartbeat_is_validated(console: Console) -> None:
    client = TestClient(console.app)
    bad = {**_heartbeat(), "node": "has space", "stats": {"x": -1}}
    answer = client.post("/api/v1/agents/heartbeat", json=bad, headers=PUSH)
    assert answer.status_code == 422
    fields = {p["field"] for p in answer.json()["detail"]}
    assert "body.node" in fields and "body.stats.x" in fields
    assert console.repository.agent_statuses() == ()


def test_a_silent_agent_is_unknown_on_console_api_and_metrics(console: Console) -> None:
    client = TestClient(console.app)
    for node in ("gpu-node-01", "gpu-node-02"):
        client.post("/api/v1/agents/heartbeat", json=_heartbeat(node), headers=PUSH)
    console.clock.advance(45)
    client.post("/api/v1/agents/heartbeat", json=_heartbeat("gpu-node-02"), headers=PUSH)
    console.clock.advance(30)  # node-01: 75 s silent (> 60 s); node-02: 30 s

    agents = {a["node"]: a for a in client.get("/api/v1/agents", headers=READER).json()}
    assert agents["gpu-node-01"]["liveness"] == "silent"
    assert agents["gpu-node-01"]["node_health"] == "unknown"
    assert agents["gpu-node-02"]["liveness"] == "reporting"
    assert agents["gpu-node-02"]["stats"] == {"records_read": 10, "records_skipped": 1}

    node = client.get("/api/v1/nodes/gpu-node-01", headers=READER).json()
    assert node["agent"]["liveness"] == "silent"
    assert client.get("/api/v1/nodes/gpu-node-03", headers=READER).json()["agent"] is None
    page = client.get("/nodes/gpu-node-01", headers=READER).text
    assert "Agent silent" in page and "<strong>unknown</strong>" in page
    overview = client.get("/", headers=READER).text
    assert "1 reporting" in overview and 'href="/nodes/gpu-node-01"' in overview

    metrics = ControllerMetrics(CollectorRegistry())
    judge = liveness_judge(
        None,
        console.clock.now(),
        silent_after=timedelta(seconds=60),
        not_ready_after=timedelta(seconds=30),
    )
    metrics.agents(console.repository.agent_statuses(), judge)
    console.deps.scrape_extra = metrics.agents_exposition  # as the controller wires it
    exposed = client.get("/metrics").text
    samples = {
        (s.name, s.labels.get("node")): s.value
        for family in text_string_to_metric_families(exposed)  # the text parses as Prometheus's
        for s in family.samples
    }
    assert samples[("remediator_agent_up", "gpu-node-01")] == 0
    assert samples[("remediator_agent_up", "gpu-node-02")] == 1
    assert samples[("remediator_agent_heartbeat_age_seconds", "gpu-node-01")] == 75
    assert samples[("remediator_agents_silent", None)] == 1
    assert exposed.count("# TYPE remediator_agent_up gauge") == 1


def test_the_overview_names_twenty_silent_agents_and_counts_the_rest(console: Console) -> None:
    client = TestClient(console.app)
    for i in range(22):
        client.post("/api/v1/agents/heartbeat", json=_heartbeat(f"gpu-node-{i:03d}"), headers=PUSH)
    console.clock.advance(120)
    overview = client.get("/", headers=READER).text
    assert overview.count('<span class="badge bad">silent</span>') == 20
    assert "and 2 more silent" in overview
    assert len(client.get("/api/v1/overview", headers=READER).json()["silent_agents"]) == 22


def _until(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def test_agent_pods_tell_a_crash_looping_dead_or_removed_agent_in_seconds(
    console: Console, sim_factory: Callable[..., SimHandle]
) -> None:
    """The real simulator's kubelets report the agents' DaemonSet pods; the controller's watch of
    them (under the shipped RBAC) decides liveness long before a heartbeat would be missed."""
    sim = sim_factory(nodes=4)
    nodes = sim.kubectl("get", "nodes", "-o", "name").split()
    crashing, unready, quiet, mute = (n.removeprefix("node/") for n in nodes)
    # The judge's clock is the wall clock the kubelets stamp, moved on by hand past the bounds.
    console.clock.advance((datetime.now(UTC) - console.clock.now()).total_seconds())
    settings = AgentIntakeSettings()
    kube = KubeClient.from_kubeconfig(sim.controller_kubeconfig)
    pods = AgentPods(kube, settings.pod_selector, console.clock)
    pods.start()
    try:
        assert pods.wait_synced(30)
        console.deps.agent_pods = pods
        client = TestClient(console.app)
        for node in (crashing, unready, quiet):
            answer = client.post("/api/v1/agents/heartbeat", json=_heartbeat(node), headers=PUSH)
            assert answer.status_code == 200, answer.text

        def agents() -> dict[str, dict[str, Any]]:
            listed = client.get("/api/v1/agents", headers=READER).json()
            return {a["node"]: a for a in listed}

        before = agents()
        assert {before[n]["liveness"] for n in (crashing, unready, quiet)} == {"reporting"}
        # An agent pod that never sent a heartbeat is listed: its pod is Ready.
        assert before[mute]["liveness"] == "reporting" and before[mute]["seen_at"] is None
        assert before[mute]["reason"].endswith("Ready; no heartbeat yet")

        def inject(node: str, behaviour: str) -> None:
            fault = {
                "type": "container",
                "node": node,
                "selector": settings.pod_selector,
                "behaviour": behaviour,
            }
            answer = httpx.post(f"{sim.inject_url}/v1/faults", json=fault, timeout=10)
            assert answer.status_code == 200, answer.text

        inject(crashing, "crash")
        inject(unready, "unready")
        _until(
            "the crash loop is seen",
            lambda: agents()[crashing]["liveness"] == "crash-looping",
        )
        found = agents()
        assert found[crashing]["node_health"] == "unknown"
        reason = found[crashing]["reason"]
        assert "CrashLoopBackOff after 1 restarts (last exit: Error, exit 1)" in reason
        assert found[crashing]["pod"]["waiting"] == "CrashLoopBackOff"
        _until("the unready pod is seen", lambda: agents()[unready]["pod"]["ready"] is False)
        assert agents()[unready]["liveness"] == "reporting"  # briefly not Ready: a restart
        console.clock.advance(31)  # past pod_not_ready_seconds; heartbeats 31 s old, not late
        found = agents()
        assert found[unready]["liveness"] == "silent"
        # The kubelet stamps whole seconds: 31 s on the test's clock, give or take one.
        assert re.search(
            r"not Ready for 3[0-3] s \(running, not ready\)$", found[unready]["reason"]
        )
        assert found[quiet]["liveness"] == "reporting"
        assert [a["node"] for a in client.get("/api/v1/agents", headers=READER).json()][:2] == (
            sorted([crashing, unready])
        )
        page = client.get(f"/nodes/{crashing}", headers=READER).text
        assert "Agent crash-looping" in page and "<strong>unknown</strong>" in page
        overview = client.get("/api/v1/overview", headers=READER).json()
        assert {a["node"] for a in overview["silent_agents"]} == {crashing, unready}

        # The DaemonSet taken away: every agent pod goes, none replaces it.
        sim.kubectl("delete", "daemonset", "remediator-agent", "-n", "remediator", "--wait=false")
        _until("the agent pods are gone", lambda: isinstance(pods.sight(quiet), PodGone))
        console.clock.advance(31)
        found = agents()
        assert found[quiet]["liveness"] == "not-deployed"
        assert found[quiet]["reason"].endswith(
            "and not replaced: the DaemonSet no longer runs on this node"
        )
        assert found[quiet]["pod"]["deleted"] is True
        assert pods.lists == 1  # one LIST, then the watch: no request per agent

        # The watch expires (410): a fresh LIST, and the deletions it saw are kept.
        gone = {"type": "watch_gone", "resources": ["pods"], "duration_seconds": 2}
        answer = httpx.post(f"{sim.inject_url}/v1/kube-faults", json=gone, timeout=10)
        assert answer.status_code == 200, answer.text
        _until("the pods listed again", lambda: pods.lists >= 2)
        assert pods.watching()
        assert agents()[quiet]["liveness"] == "not-deployed"
    finally:
        pods.stop()
        kube.close()

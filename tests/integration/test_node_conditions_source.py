"""The node-condition source against the simulator's Kubernetes API."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from remediator.kube.client import KubeClient
from remediator.signals.model import SignalKind
from remediator.signals.sources.base import SourceResult
from remediator.signals.sources.node_conditions import NodeConditionConfig, NodeConditionSource
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration

XID_LINE = "NVRM: Xid (PCI:0000:5d:00): 79, pid=4242, name=python3, GPU has fallen off the bus."


def poll_until(
    source: NodeConditionSource, predicate: Callable[[SourceResult], bool], timeout: float = 60.0
) -> SourceResult:
    deadline = time.monotonic() + timeout
    while True:
        result = source.poll(datetime.now(UTC))
        if predicate(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met in {timeout}s; last: {result}")
        time.sleep(0.2)


def inject(sim: SimHandle, **fault: Any) -> None:
    response = httpx.post(f"{sim.inject_url}/v1/faults", json=fault, timeout=10.0)
    assert response.status_code == 200, response.text


def test_conditions_from_the_api_server_and_down_when_it_is_gone(sim: SimHandle) -> None:
    source = NodeConditionSource(KubeClient.from_kubeconfig(sim.kubeconfig, timeout=5.0))
    healthy = poll_until(source, lambda r: r.health.up and not r.signals)
    assert healthy.health.detail["nodes"] == "4"
    nodes = sorted(sim.kubectl("get", "nodes", "-o", "name").split())
    assert sorted(f"node/{n.name}" for n in source.all_nodes or ()) == nodes
    victim = nodes[1].removeprefix("node/")

    inject(
        sim,
        type="condition",
        node=victim,
        condition="GpuXidFatal",
        status="True",
        reason="XID79",
        message=XID_LINE,
    )
    broken = poll_until(source, lambda r: bool(r.signals))
    (signal,) = broken.signals
    assert (signal.node, signal.kind, signal.code) == (victim, SignalKind.NODE_CONDITION, 1)
    assert signal.labels["type"] == "GpuXidFatal"
    assert signal.labels["reason"] == "XID79"
    assert signal.labels["message"] == XID_LINE
    assert (signal.labels["xid"], signal.labels["pci"]) == ("79", "0000:5d:00")

    counted_elsewhere = NodeConditionSource(
        KubeClient.from_kubeconfig(sim.kubeconfig),
        NodeConditionConfig(condition_types=frozenset({"Ready"})),
    )
    assert counted_elsewhere.poll(datetime.now(UTC)).signals == ()
    selective = NodeConditionSource(
        KubeClient.from_kubeconfig(sim.kubeconfig), NodeConditionConfig(label_selector="gpu=none")
    )
    assert selective.poll(datetime.now(UTC)).health.up
    assert selective.all_nodes is None  # a filtered LIST is not the whole cluster

    inject(sim, type="clear", node=victim)
    poll_until(source, lambda r: r.health.up and not r.signals)

    last_ok = source.poll(datetime.now(UTC)).health.checked_at
    sim.stop()
    down = source.poll(datetime.now(UTC))
    assert not down.health.up
    assert down.signals == ()
    assert source.all_nodes is None  # the controller lists for itself and fails safe
    assert "unreachable" in (down.health.error or "")
    assert down.health.last_success_at == last_ok

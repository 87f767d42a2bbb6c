"""A rack repaired or replaced as one node-pool operation: the provider call (HTTP, with its
errors wrapped at the edge; refused by a provider that has no racks), the pure judgement of the
operation, of a tray back from it, of one step done on every tray of a rack, and of a rack's
validation from its trays' own."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import respx
from prometheus_client import CollectorRegistry

from remediator.actions.outcome import Done, Failed, Held, Waiting
from remediator.errors import NotFoundError, PermanentError
from remediator.kube.objects import Node, NodeCondition
from remediator.providers.base import (
    Operation,
    OperationState,
    RackUnsupported,
    request_rack_operation,
)
from remediator.providers.http import HttpNodePoolProvider
from remediator.providers.instrumented import InstrumentedProvider, ProviderMetrics
from remediator.providers.select import PoolProviders
from remediator.remediation.steps.domain import all_trays, judge_rack, tray_problems
from remediator.remediation.steps.validate import rack_verdict

BASE = "http://nodepool.test"
T0 = datetime(2026, 1, 1, tzinfo=UTC)
RACK_OP = {
    "id": "op-r",
    "pool": "gb200-nvl72",
    "node": "rack-0",
    "rack": "rack-0",
    "action": "replace",
    "state": "pending",
    "new_node": None,
    "error": None,
}


def http() -> HttpNodePoolProvider:
    return HttpNodePoolProvider(BASE, max_retries=0, sleep=lambda _s: None)


def test_the_http_provider_posts_the_rack_operation_with_its_key() -> None:
    with respx.mock(base_url=BASE) as api:
        route = api.post("/v1/pools/gb200-nvl72/racks/rack-0/replace").respond(202, json=RACK_OP)
        op = request_rack_operation(http(), "gb200-nvl72", "rack-0", "replace", "k-1", "sxid")
    assert (op.id, op.node, op.state) == ("op-r", "rack-0", OperationState.PENDING)
    sent = route.calls.last.request
    assert sent.headers["Idempotency-Key"] == "k-1"
    assert json.loads(sent.content) == {"reason": "sxid"}


def test_an_unknown_rack_and_a_busy_rack_are_errors_of_ours() -> None:
    with respx.mock(base_url=BASE) as api:
        api.post("/v1/pools/p/racks/rack-9/repair").respond(
            404, json={"error": {"code": "rack_not_found", "message": "no rack-9"}}
        )
        api.post("/v1/pools/p/racks/rack-0/repair").respond(
            409, json={"error": {"code": "replacement_in_progress", "message": "busy"}}
        )
        with pytest.raises(NotFoundError, match="rack_not_found"):
            request_rack_operation(http(), "p", "rack-9", "repair", "k", "r")
        with pytest.raises(PermanentError, match="replacement_in_progress"):
            request_rack_operation(http(), "p", "rack-0", "repair", "k", "r")


def test_a_provider_without_racks_and_an_unknown_action_are_refused() -> None:
    with pytest.raises(RackUnsupported, match="cannot replace a rack"):
        request_rack_operation(object(), "p", "rack-0", "replace", "k", "r")
    with pytest.raises(PermanentError, match="no rack action 'rebuild'"):
        request_rack_operation(http(), "p", "rack-0", "rebuild", "k", "r")


def op(state: OperationState, error: str | None = None) -> Operation:
    return Operation("op-r", "p", "rack-0", state, error=error)


def test_judge_rack() -> None:
    later = T0 + timedelta(seconds=10)
    assert isinstance(judge_rack(op(OperationState.SUCCEEDED), "rack-0", T0, later, 60), Done)
    pending = judge_rack(op(OperationState.PROVISIONING), "rack-0", T0, later, 60)
    assert isinstance(pending, Waiting) and "provisioning" in pending.reason
    failed = judge_rack(op(OperationState.FAILED, "power: no"), "rack-0", T0, later, 60)
    assert isinstance(failed, Failed) and "power: no" in failed.reason
    late = judge_rack(op(OperationState.PENDING), "rack-0", T0, T0 + timedelta(hours=1), 60)
    assert isinstance(late, Failed) and "after 60s" in late.reason


def tray(ready: bool = True, gpus: int | None = 4, boot: str = "b2") -> Node:
    cond = NodeCondition("Ready", "True" if ready else "False")
    return Node("t", "t", "1", conditions=(cond,), gpus=gpus, boot_id=boot)


def test_a_tray_is_back_when_there_ready_with_gpus_on_a_new_boot() -> None:
    assert tray_problems(tray(), "t", "b1") == []
    assert tray_problems(None, "t", "b1") == ["t has not joined the cluster"]
    assert tray_problems(tray(ready=False), "t", "b1") == ["t is not Ready"]
    assert tray_problems(tray(gpus=0), "t", "b1") == ["t advertises no GPUs"]
    assert tray_problems(tray(boot="b1"), "t", "b1") == ["t has not rebooted"]


def test_all_trays() -> None:
    trays = ("a", "b", "c")
    done = Done("a done", {"node": "a"})
    waiting = Waiting("b busy", 1.0, {"node": "b"})
    together = all_trays(trays, [done, done, done])
    assert isinstance(together, Done) and together.facts["trays"] == list(trays)
    assert "2 other tray(s)" in together.detail
    one_waits = all_trays(trays, [done, waiting, done])
    assert isinstance(one_waits, Waiting) and one_waits.facts["waiting"] == ["b"]
    held = Held("someone else's", {})
    assert all_trays(trays, [done, waiting, held]) is held


class Racks(HttpNodePoolProvider):
    """A provider with racks that answers without a network."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []

    def request_rack_operation(
        self, pool: str, rack: str, action: str, idempotency_key: str, reason: str
    ) -> Operation:
        self.asked.append((pool, rack, action))
        return Operation("op-r", pool, rack, OperationState.PENDING)


def test_the_rack_call_passes_through_the_metrics_and_the_pools_own_provider() -> None:
    registry = CollectorRegistry()
    inner = Racks()
    counted = InstrumentedProvider(inner, ProviderMetrics(registry))
    assert request_rack_operation(counted, "p", "rack-0", "repair", "k", "r").id == "op-r"
    calls = registry.get_sample_value(
        "remediator_provider_call_duration_seconds_count",
        {"operation": "request_rack_operation", "result": "ok"},
    )
    assert calls == 1
    # A pool with its own provider: the operation id says which, to be followed there.
    pools = PoolProviders(http(), {"gb200-nvl72": inner})
    op = request_rack_operation(pools, "gb200-nvl72", "rack-1", "replace", "k", "r")
    assert op.id == "gb200-nvl72::op-r"
    assert inner.asked[-1] == ("gb200-nvl72", "rack-1", "replace")


def test_a_racks_validation_waits_for_every_tray_and_fails_on_one() -> None:
    trays = ("t0", "t1", "t2")
    passed = Done("t0 passed validation: ok", {"node": "t0", "checks": []})
    slow = Failed("all_reduce_perf: under the floor", {"node": "t1", "checks": [{"check": "nccl"}]})
    running = Waiting("validating t2: dcgm running", 5.0, {"node": "t2"})

    waiting = rack_verdict("rack-0", trays, [passed, slow, running])
    assert isinstance(waiting, Waiting) and waiting.facts["waiting"] == ["t2"]
    assert "1 of 3 trays still validating" in waiting.reason

    failed = rack_verdict("rack-0", trays, [passed, slow, passed])
    assert isinstance(failed, Failed)
    assert failed.reason == "rack rack-0: 1 of 3 trays failed validation; " + slow.reason
    assert failed.facts["node"] == "t1" and failed.facts["checks"] == [{"check": "nccl"}]
    assert [(v["node"], v["passed"]) for v in failed.facts["trays"]] == [
        ("t0", True),
        ("t1", False),
        ("t2", True),
    ]

    held = Held("validation Job cannot run on t2: unschedulable", {"node": "t2"})
    assert isinstance(rack_verdict("rack-0", trays, [passed, slow, held]), Held)

    done = rack_verdict("rack-0", trays, [passed, passed, passed])
    assert isinstance(done, Done) and done.detail == "rack rack-0: all 3 trays passed validation"
    assert all(v["passed"] for v in done.facts["trays"])

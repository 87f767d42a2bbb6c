"""Quarantined machines (issue #28): the pure rule (ledger/hold.py) and its executor
(remediation/machine_hold.py) over a migrated SQLite: strikes from replacements and failed
validations, one per remediation, counted in the window and since the last lift; the ledger
record, the timeline line, the Cluster API marks, and the steps' hold reason."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from remediator.actions.quarantine import ANN_MACHINE_HOLD, ANN_PRIOR_CORDON, QUARANTINE_TAINT
from remediator.clock import FakeClock
from remediator.errors import NotFoundError
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node, ObjectRef, Taint
from remediator.ledger.hold import (
    REPLACED,
    VALIDATION_FAILED,
    ArrivalFence,
    NodeSeen,
    Strike,
    fences_due,
    hold_due,
)
from remediator.ledger.identity import GCE_INSTANCE_ID, GpuIdentity
from remediator.ledger.store import FENCED, HOLD, VERDICT, Ledger
from remediator.model.states import State
from remediator.policy.schema import MachineHoldSettings
from remediator.providers.clusterapi import HOLD_KEY, metal3_host
from remediator.remediation import commands
from remediator.remediation.machine_hold import FENCED_REASON, MachineHolds, failed_gpus
from remediator.remediation.service import TransitionSeen
from remediator.store import db
from remediator.store.records import NewRemediation, RemediationFilter, RemediationRecord
from remediator.store.repository import Repository

T0 = datetime(2026, 11, 1, tzinfo=UTC)
DAY = timedelta(days=1)
GPU = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
METAL3 = "metal3://metal3/host-7/m3m-7"


def strike(kind: str, days: float, remediation: int | None) -> Strike:
    return Strike(
        REPLACED if kind == "r" else VALIDATION_FAILED, T0 + days * DAY, "n1", remediation
    )


def test_the_count_within_the_window_holds_the_machine() -> None:
    strikes = [strike("r", 1, 1), strike("v", 5, 2), strike("r", 9, 3)]
    assert hold_due("m", strikes[:2], count=3, within=30 * DAY, now=T0 + 10 * DAY) is None
    held = hold_due("m", strikes, count=3, within=30 * DAY, now=T0 + 10 * DAY)
    assert held is not None and held.remediation_id == 3 and len(held.strikes) == 3
    assert "failed validation on n1 (#2)" in held.reason and "within 30 days" in held.reason


def test_one_remediation_counts_once_and_old_or_lifted_strikes_not_at_all() -> None:
    # Validation failed, then the same remediation replaced the machine: one incident.
    same = [strike("v", 1, 1), strike("r", 1.1, 1), strike("r", 2, 2)]
    assert hold_due("m", same, count=3, within=30 * DAY, now=T0 + 3 * DAY) is None
    assert hold_due("m", same, count=2, within=30 * DAY, now=T0 + 3 * DAY) is not None
    old = [strike("r", 1, 1), strike("r", 40, 2), strike("r", 41, 3)]
    assert hold_due("m", old, count=3, within=30 * DAY, now=T0 + 42 * DAY) is None
    recent = [strike("r", 1, 1), strike("r", 2, 2), strike("r", 3, 3)]
    lifted = T0 + 2.5 * DAY
    now = T0 + 4 * DAY
    assert hold_due("m", recent, count=3, within=30 * DAY, now=now, lifted_at=lifted) is None
    assert hold_due("m", recent, count=0, within=30 * DAY, now=now) is None


def test_failed_dcgm_tests_name_gpus_by_index() -> None:
    tests = [
        {"test": "memory", "gpu": "1", "status": "Fail"},
        {"test": "pcie", "gpu": "1,3", "status": "fail"},
        {"test": "sm_stress", "gpu": "0", "status": "Pass"},
        {"test": "software", "status": "Fail"},
    ]
    assert failed_gpus(tests) == {1: ["memory", "pcie"], 3: ["pcie"]}
    assert metal3_host(METAL3) == ("metal3", "host-7")
    assert metal3_host("aws:///us-east-1a/i-1") is None


class StubKube:
    """The two calls the executor makes: a node's identity and a merge patch of a custom
    object (recorded)."""

    def __init__(self, nodes: Mapping[str, Node]) -> None:
        self.nodes = dict(nodes)
        self.patched: list[tuple[str, str, str, str, dict[str, Any]]] = []
        self.events: list[tuple[str, str, str]] = []
        self.calls: list[tuple[str, list[str]]] = []

    def get_node(self, name: str) -> Node:
        if name not in self.nodes:
            raise NotFoundError(f"node {name} not found")
        return self.nodes[name]

    def annotate_and_cordon(self, name: str, annotations: Mapping[str, str]) -> Node:
        self.set_node_annotations(name, annotations)
        return self._set(name, unschedulable=True)

    def add_taint(self, name: str, taint: Taint) -> Node:
        return self._set(name, taints=(*self.nodes[name].taints, taint))

    def set_node_annotations(self, name: str, annotations: Mapping[str, str]) -> Node:
        return self._set(name, annotations={**self.nodes[name].annotations, **annotations})

    def create_event(self, about: ObjectRef, reason: str, message: str, type_: str) -> None:
        self.events.append((about.name, reason, message))

    def _set(self, name: str, **changes: Any) -> Node:
        self.calls.append((name, sorted(changes)))
        self.nodes[name] = dataclasses.replace(self.nodes[name], **changes)
        return self.nodes[name]

    def patch_custom(
        self, gv: str, plural: str, namespace: str, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        self.patched.append((gv, plural, namespace, name, patch))
        return patch


@pytest.fixture
def world(sqlite_head_template: Path, tmp_path: Path) -> tuple[Repository, Ledger, FakeClock]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    engine = db.make_engine(f"sqlite:///{tmp_path / 'remediator.db'}")
    clock = FakeClock(T0)
    factory = db.make_session_factory(engine)
    return Repository(factory, "default", clock), Ledger(factory, "default", clock), clock


def holds_of(
    repo: Repository, ledger: Ledger, clock: FakeClock, kube: StubKube, kind: str
) -> MachineHolds:
    return MachineHolds(
        ledger,
        cast(KubeClient, kube),
        repo,
        clock,
        settings=lambda: MachineHoldSettings(count=2, within=30 * DAY),
        provider_kind=lambda _pool: kind,
        actor="test",
    )


def remediation(repo: Repository, node: str, key: str) -> RemediationRecord:
    """A new remediation of the node (an earlier open one is cancelled first)."""
    for open_one in repo.list(RemediationFilter(node=node)).rows:
        if open_one.state is State.CANCELLED:
            continue
        repo.transition(
            open_one.id,
            open_one.state,
            State.CANCELLED,
            action="cancelled",
            actor="test",
            detail={},
            expected_version=open_one.version,
        )
    return repo.create(
        NewRemediation(
            node=node,
            policy="xid-79",
            reason="XID 79",
            signals=[],
            ladder=[{"action": "replace"}],
            pool="gpu",
            idempotency_key=key,
            signal_kind="xid",
        ),
        actor="test",
    )


def seen(record: RemediationRecord, action: str, detail: dict[str, Any]) -> TransitionSeen:
    return TransitionSeen(record, record, 1.0, action, detail)


def test_a_bare_metal_host_replaced_twice_is_held_and_its_node_left_fenced(
    world: tuple[Repository, Ledger, FakeClock],
) -> None:
    repo, ledger, clock = world
    kube = StubKube({})
    holds = holds_of(repo, ledger, clock, kube, "http")
    ledger.observe_machine("gpu-a1", "dmi:SN1", T0, dmi_serial="SN1")
    first = remediation(repo, "gpu-a1", "k1")
    holds.on_transition(seen(first, "replace_done", {}))
    assert not ledger.quarantined("dmi:SN1") and holds.hold_on("gpu-a1") is None
    # Repaired, back in the pool under a new name, replaced again within the window.
    clock.advance(5 * DAY.total_seconds())
    ledger.observe_machine("gpu-a7", "dmi:SN1", clock.now(), dmi_serial="SN1")
    second = remediation(repo, "gpu-a7", "k2")
    holds.on_transition(seen(second, "replace_done", {}))
    life = ledger.machine("dmi:SN1")
    assert life is not None and life.quarantined_at == clock.now()
    assert life.quarantined_by == second.id
    assert "replaced on gpu-a1" in (life.quarantine_reason or "")
    held = holds.hold_on("gpu-a7")
    assert held is not None and "quarantined machine dmi:SN1" in held
    timeline = repo.get(second.id)
    assert timeline is not None
    line = next(e for e in timeline.events if e.action == "machine_held")
    assert line.detail["machine"] == "dmi:SN1" and line.detail["marked"] == []
    assert [link.kind for link in life.links if link.subject == HOLD] == ["held"]
    # Lifted by an operator: returned, and its strikes so far count no more.
    clock.advance(DAY.total_seconds())
    assert ledger.lift("dmi:SN1", clock.now(), actor="alice", reason="board replaced")
    assert not ledger.lift("dmi:SN1", clock.now(), actor="alice", reason="twice")
    assert holds.hold_on("gpu-a7") is None
    third = remediation(repo, "gpu-a7", "k3")
    holds.on_transition(seen(third, "replace_done", {}))
    assert not ledger.quarantined("dmi:SN1")


def test_failed_validations_hold_a_cluster_api_machine_and_name_the_gpu(
    world: tuple[Repository, Ledger, FakeClock],
) -> None:
    repo, ledger, clock = world
    node = Node(
        name="gpu-m1",
        uid="u1",
        resource_version="1",
        provider_id=METAL3,
        annotations={
            "cluster.x-k8s.io/machine": "pool-abc",
            "cluster.x-k8s.io/cluster-namespace": "capi",
        },
    )
    kube = StubKube({"gpu-m1": node})
    holds = holds_of(repo, ledger, clock, kube, "clusterapi")
    ledger.observe_machine("gpu-m1", "metal3:metal3:host-7:m3m-7", T0, provider_id=METAL3)
    ledger.observe_gpus("gpu-m1", [GpuIdentity(GPU, "0000:18:00.0", 1)], T0)
    checks = [
        {
            "check": "dcgm",
            "passed": False,
            "reason": "DCGM level 3: memory on GPU 1",
            "failed": [{"test": "memory", "gpu": "1", "status": "Fail"}],
        }
    ]
    detail = {"node": "gpu-m1", "reason": "DCGM level 3: memory on GPU 1", "checks": checks}
    for key in ("k1", "k2"):
        clock.advance(DAY.total_seconds())
        record = remediation(repo, "gpu-m1", key)
        holds.on_transition(seen(record, "validate_failed", detail))
    assert ledger.quarantined("metal3:metal3:host-7:m3m-7")
    marked = {(plural, ns, name) for _, plural, ns, name, _ in kube.patched}
    assert marked == {("machines", "capi", "pool-abc"), ("baremetalhosts", "metal3", "host-7")}
    host = next(p for _, plural, _, _, p in kube.patched if plural == "baremetalhosts")
    assert host["metadata"]["labels"] == {HOLD_KEY: "true"}
    life = ledger.gpu(GPU)
    assert life is not None
    verdicts = [link for link in life.links if link.subject == VERDICT]
    assert [(v.kind, v.detail["step"], v.detail["tests"]) for v in verdicts] == [
        ("failed", "validate", ["memory"]),
        ("failed", "validate", ["memory"]),
    ]


def test_a_diagnosis_is_linked_to_the_gpu_it_names_but_is_no_strike(
    world: tuple[Repository, Ledger, FakeClock],
) -> None:
    repo, ledger, clock = world
    holds = holds_of(repo, ledger, clock, StubKube({}), "aws")
    ledger.observe_machine("gpu-a1", "aws:i-1", T0)
    ledger.observe_gpus("gpu-a1", [GpuIdentity(GPU, "0000:18:00.0", 0)], T0)
    tests = [{"test": "pcie", "gpu": "0", "status": "Fail"}]
    for key in ("k1", "k2", "k3"):
        clock.advance(DAY.total_seconds())
        record = remediation(repo, "gpu-a1", key)
        holds.on_transition(seen(record, "diagnose_failed", {"node": "gpu-a1", "tests": tests}))
    assert not ledger.quarantined("aws:i-1")
    life = ledger.gpu(GPU)
    assert life is not None
    assert [v.detail["step"] for v in life.links if v.subject == VERDICT] == ["diagnose"] * 3


def test_a_recreated_instance_is_not_held_for_the_old_machine_under_its_name(
    world: tuple[Repository, Ledger, FakeClock],
) -> None:
    """GCE recreates an instance under its name: the quarantined machine was the old one, and
    the step asking about the name before the intake saw the new one must not hold it."""
    repo, ledger, clock = world
    recreated = Node(
        name="gpu-g1",
        uid="u2",
        resource_version="2",
        provider_id="gce://p/z/gpu-g1",
        annotations={GCE_INSTANCE_ID: "222"},
    )
    kube = StubKube({"gpu-g1": recreated})
    holds = holds_of(repo, ledger, clock, kube, "gce")
    ledger.observe_machine("gpu-g1", "gce:111", T0)
    assert ledger.quarantine("gce:111", "the same GPU failed twice", T0)
    assert ledger.machine_of("gpu-g1") == "gce:111"  # the picture has not caught up
    assert holds.hold_on("gpu-g1") is None
    kube.nodes.clear()  # gone: the picture is all there is
    assert holds.hold_on("gpu-g1") is not None


def test_a_node_on_a_quarantined_machine_is_fenced_once_and_only_what_is_missing() -> None:
    held = {"dmi:SN1": "replaced 3 times"}
    nodes = [
        NodeSeen("gpu-new", "dmi:SN1", cordoned=False, tainted=False),
        NodeSeen("gpu-human", "dmi:SN1", cordoned=True, tainted=False),
        NodeSeen("gpu-fenced", "dmi:SN1", cordoned=True, tainted=True),
        NodeSeen("gpu-other", "dmi:SN2", cordoned=False, tainted=False),
        NodeSeen("gpu-unknown", None, cordoned=False, tainted=False),
    ]
    assert fences_due(nodes, held, set()) == [
        ArrivalFence("gpu-new", "dmi:SN1", "replaced 3 times", cordon=True, taint=True),
        ArrivalFence("gpu-human", "dmi:SN1", "replaced 3 times", cordon=False, taint=True),
    ]
    # Fenced once on arrival: a human who uncordons it afterwards is not fought.
    once = {("dmi:SN1", "gpu-new"), ("dmi:SN1", "gpu-human")}
    assert fences_due(nodes, held, once) == []
    assert fences_due(nodes, {}, set()) == []


def test_a_cancel_on_a_quarantined_machine_says_its_node_stays_fenced(
    world: tuple[Repository, Ledger, FakeClock],
) -> None:
    repo, ledger, clock = world
    holds = holds_of(repo, ledger, clock, StubKube({}), "http")
    ledger.observe_machine("gpu-a1", "dmi:SN1", T0, dmi_serial="SN1")
    assert ledger.quarantine("dmi:SN1", "replaced twice", T0)
    held = remediation(repo, "gpu-a1", "k1")
    other = remediation(repo, "gpu-b1", "k2")
    cancelled = commands.run(
        repo, "cancel", held.id, actor="carol", reason="ours now", machine_hold=holds.hold_on
    )
    assert cancelled.state is State.CANCELLED
    assert cancelled.hold_reason is not None
    assert cancelled.hold_reason.startswith("gpu-a1 stays fenced: quarantined machine dmi:SN1")
    timeline = repo.get(held.id)
    assert timeline is not None
    line = timeline.events[-1]
    assert line.action == "cancelled" and list(line.detail["kept_fenced"]) == ["gpu-a1"]
    plain = commands.run(repo, "cancel", other.id, actor="carol", machine_hold=holds.hold_on)
    plain_timeline = repo.get(other.id)
    assert plain.hold_reason is None and plain_timeline is not None
    assert "kept_fenced" not in plain_timeline.events[-1].detail


def test_a_quarantined_machine_back_under_a_new_name_is_fenced_on_arrival(
    world: tuple[Repository, Ledger, FakeClock],
) -> None:
    repo, ledger, clock = world
    ledger.observe_machine("gpu-m1", "metal3:metal3:host-7:m3m-7", T0, provider_id=METAL3)
    assert ledger.quarantine("metal3:metal3:host-7:m3m-7", "failed validation twice", T0)
    back = Node(name="gpu-m9", uid="u9", resource_version="1", provider_id=METAL3)
    cordoned = Node(
        name="gpu-m8", uid="u8", resource_version="1", provider_id=METAL3, unschedulable=True
    )
    healthy = Node(name="gpu-x1", uid="u1", resource_version="1", provider_id="aws:///z/i-1")
    kube = StubKube({n.name: n for n in (back, cordoned, healthy)})
    holds = holds_of(repo, ledger, clock, kube, "clusterapi")
    clock.advance(60)
    assert holds.fence_arrivals(list(kube.nodes.values())) == ["gpu-m9", "gpu-m8"]
    fenced = kube.nodes["gpu-m9"]
    assert fenced.unschedulable and fenced.has_taint(QUARANTINE_TAINT)
    assert kube.nodes["gpu-m9"].annotations == {ANN_MACHINE_HOLD: "metal3:metal3:host-7:m3m-7"}
    assert kube.nodes["gpu-m8"].annotations == {
        ANN_MACHINE_HOLD: "metal3:metal3:host-7:m3m-7",
        ANN_PRIOR_CORDON: "true",
    }
    assert not kube.nodes["gpu-x1"].unschedulable
    assert [(node, reason) for node, reason, _ in kube.events] == [
        ("gpu-m9", FENCED_REASON),
        ("gpu-m8", FENCED_REASON),
    ]
    assert "failed validation twice" in kube.events[0][2]
    # Once: a human uncordons gpu-m9 on purpose; the next pass leaves it.
    kube.nodes["gpu-m9"] = dataclasses.replace(fenced, unschedulable=False, taints=())
    calls = len(kube.calls)
    assert holds.fence_arrivals(list(kube.nodes.values())) == []
    assert len(kube.calls) == calls
    life = ledger.machine("metal3:metal3:host-7:m3m-7")
    assert life is not None
    lines = [(link.kind, link.node) for link in life.links if link.subject == HOLD]
    assert sorted(lines) == [(FENCED, "gpu-m8"), (FENCED, "gpu-m9"), ("held", "gpu-m1")]
    # Lifted, then quarantined again: a new hold fences again.
    clock.advance(60)
    assert ledger.lift("metal3:metal3:host-7:m3m-7", clock.now(), actor="a", reason="fixed")
    assert holds.fence_arrivals(list(kube.nodes.values())) == []
    clock.advance(60)
    assert ledger.quarantine("metal3:metal3:host-7:m3m-7", "again", clock.now())
    assert holds.fence_arrivals(list(kube.nodes.values())) == ["gpu-m9"]

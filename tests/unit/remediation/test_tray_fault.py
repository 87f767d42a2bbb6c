"""A tray fault's plan: the whole gang notified once, the faulty tray drained, a spare of the
same domain taken into service, or the gang released when the domain has none."""

from __future__ import annotations

from datetime import UTC, datetime

from remediator.kube.objects import Pod
from remediator.model.topology import CLIQUE_LABEL, SPARE_LABEL, build_topology
from remediator.remediation.tray_fault import GANG_LABEL, plan_tray_fault

UUIDS = ["b7e1f3a2-0c4d-4e5f-8a9b-0123456789ab", "c8f2a4b3-1d5e-4f60-9bac-123456789abc"]


def labels(spares: int = 2) -> dict[str, dict[str, str]]:
    out = {}
    for r, uuid in enumerate(UUIDS):
        for t in range(18):
            node = {
                CLIQUE_LABEL: f"{uuid}.0",
                "remediator.io/rack": f"rack-{r}",
                "remediator.io/tray": str(t),
            }
            if t >= 18 - spares:
                node[SPARE_LABEL] = "true"
            out[f"nvl-r{r}-t{t:02d}"] = node
    return out


def gang_pods(rack: int, trays: int = 16) -> list[Pod]:
    return [
        Pod(
            "train",
            f"gang-r{rack}-c0-{t}",
            f"uid-{rack}-{t}",
            node_name=f"nvl-r{rack}-t{t:02d}",
            labels={GANG_LABEL: f"gang-r{rack}-c0"},
            phase="Running",
        )
        for t in range(trays)
    ]


PODS = [
    *gang_pods(0),
    *gang_pods(1),
    Pod("infer", "lone", "uid-lone", node_name="nvl-r0-t03", phase="Running"),
    Pod(
        "train",
        "gang-r0-c0-old",
        "uid-old",
        node_name="nvl-r0-t03",
        labels={GANG_LABEL: "gang-r0-c0"},
        phase="Running",
        deletion_timestamp=datetime(2026, 1, 1, tzinfo=UTC),
    ),
]
READY = {node: True for node in labels()}


def test_every_pod_of_the_gang_is_notified_and_the_first_ready_spare_is_taken() -> None:
    plan = plan_tray_fault("nvl-r0-t03", build_topology(labels()), PODS, READY)
    assert plan.gangs == ("train/gang-r0-c0",)
    assert [p.node_name for p in plan.notify] == [f"nvl-r0-t{t:02d}" for t in range(16)]
    assert plan.decision == "spare" and plan.spare == "nvl-r0-t16" and plan.release == ()
    assert plan.reason == (
        f"spare tray nvl-r0-t16 of domain {UUIDS[0]} taken into service; nvl-r0-t03 goes to "
        "replacement"
    )


def test_a_spare_not_ready_or_busy_is_no_spare() -> None:
    ready = READY | {"nvl-r0-t16": False}
    plan = plan_tray_fault("nvl-r0-t03", build_topology(labels()), PODS, ready)
    assert plan.spare == "nvl-r0-t17"
    none = plan_tray_fault(
        "nvl-r0-t03", build_topology(labels()), PODS, ready, busy=frozenset({"nvl-r0-t17"})
    )
    assert none.decision == "release"


def test_without_a_spare_in_the_domain_the_gang_is_released() -> None:
    plan = plan_tray_fault("nvl-r0-t03", build_topology(labels(spares=0)), PODS, READY)
    assert plan.decision == "release" and plan.spare is None
    assert plan.release == plan.notify and len(plan.release) == 16
    assert {p.labels[GANG_LABEL] for p in plan.release} == {"gang-r0-c0"}
    assert plan.reason == (
        "no spare in rack rack-0: gang released (train/gang-r0-c0) to reschedule into another "
        f"domain than {UUIDS[0]}"
    )


def test_a_tray_without_clique_label_is_per_node() -> None:
    plain = labels() | {"plain": {}}
    plan = plan_tray_fault("plain", build_topology(plain), PODS, READY)
    assert plan.decision == "per_node" and plan.domain is None


def test_a_spare_already_taken_for_this_fault_is_kept_after_a_restart() -> None:
    # The spare's label is gone once taken: the topology no longer lists it as a spare.
    after = labels()
    del after["nvl-r0-t16"][SPARE_LABEL]
    plan = plan_tray_fault("nvl-r0-t03", build_topology(after), PODS, READY, taken="nvl-r0-t16")
    assert plan.decision == "spare" and plan.spare == "nvl-r0-t16"

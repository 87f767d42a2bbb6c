"""The rack view's pure core (web/racks.py `domains_out`), issue 39 item 4: the trays a domain
remediation holds show as in it, racks come in name order, and a gang's Terminating pods are
not counted running."""

from __future__ import annotations

from datetime import UTC, datetime

from remediator.kube.objects import Node, NodeCondition, Pod
from remediator.model.states import State
from remediator.model.topology import CLIQUE_LABEL, TopologySettings
from remediator.web.racks import domains_out
from tests.unit.web.builders import event, record

GANG = "remediator.io/gang"


def tray(rack: int, slot: int, *, ready: bool = True) -> Node:
    return Node(
        f"nvl-r{rack}-t{slot:02d}",
        uid=f"u-{rack}-{slot}",
        resource_version="1",
        labels={
            CLIQUE_LABEL: f"rack{rack}-uuid.0",
            "remediator.io/rack": f"rack-{rack}",
            "remediator.io/tray": str(slot),
        },
        conditions=(NodeCondition("Ready", "True" if ready else "Unknown"),),
        gpus=4,
    )


def test_every_tray_a_domain_remediation_holds_shows_in_it() -> None:
    nodes = [tray(0, t, ready=False) for t in range(18)]
    detected = event(
        1, 0, None, State.DETECTED, "detected", {"scope": "domain", "domain": "rack0-uuid"}
    )
    rack = record(State.DRAINING, (detected,), id=7, node="nvl-r0-t00", policy="rack-down")
    (domain,) = domains_out(nodes, [], [rack], TopologySettings()).domains
    assert domain.counts == {"in remediation": 18}
    assert {t.remediation for t in domain.trays if t.node} == {7}
    assert [t.covered_by for t in domain.trays[:2]] == [None, "nvl-r0-t00"]
    assert [r.id for r in domain.remediations] == [7]


def test_racks_are_in_name_order() -> None:
    nodes = [tray(r, 0) for r in (10, 2, 1)]
    view = domains_out(nodes, [], [], TopologySettings())
    assert [d.rack for d in view.domains] == ["rack-1", "rack-2", "rack-10"]


def test_a_gangs_terminating_pods_are_not_running() -> None:
    nodes = [tray(0, t) for t in range(3)]
    gone = datetime(2026, 3, 1, tzinfo=UTC)
    pods = [
        Pod("training", "g-0", "p0", "nvl-r0-t00", {GANG: "g"}, phase="Running"),
        Pod(
            "training",
            "g-1",
            "p1",
            "nvl-r0-t01",
            {GANG: "g"},
            phase="Running",
            deletion_timestamp=gone,
        ),
        Pod("training", "g-2", "p2", "", {GANG: "g"}),
    ]
    (domain,) = domains_out(nodes, pods, [], TopologySettings()).domains
    (job,) = domain.jobs
    assert (job.running, job.terminating, job.pending) == (1, 1, 1)

"""Labels -> NVLink domains, cliques and trays; bad labels reported, never guessed."""

from __future__ import annotations

import pytest

from remediator.model.topology import (
    CLIQUE_LABEL,
    SPARE_LABEL,
    Clique,
    TopologySettings,
    build_topology,
    parse_clique,
)

UUID0 = "b7e1f3a2-0c4d-4e5f-8a9b-0123456789ab"
UUID1 = "c8f2a4b3-1d5e-4f60-9bac-123456789abc"


def tray(rack: int, slot: int, uuid: str, clique: int = 0, spare: bool = False) -> dict[str, str]:
    labels = {
        CLIQUE_LABEL: f"{uuid}.{clique}",
        "remediator.io/rack": f"rack-{rack}",
        "remediator.io/tray": str(slot),
    }
    if spare:
        labels[SPARE_LABEL] = "true"
    return labels


def nvl72(racks: int = 2, spares: int = 2, cliques: int = 1) -> dict[str, dict[str, str]]:
    uuids = [UUID0, UUID1]
    return {
        f"nvl-r{r}-t{t:02d}": tray(r, t, uuids[r], clique=t * cliques // 18, spare=t >= 18 - spares)
        for r in range(racks)
        for t in range(18)
    }


def test_two_racks_are_two_domains_of_eighteen_trays_with_their_spares() -> None:
    topo = build_topology(nvl72())
    assert sorted(topo.domains) == [UUID0, UUID1]
    rack0 = topo.domains[UUID0]
    assert rack0.rack == "rack-0"
    assert rack0.nodes == tuple(f"nvl-r0-t{t:02d}" for t in range(18))
    assert rack0.spares == ("nvl-r0-t16", "nvl-r0-t17")
    assert topo.domain_of("nvl-r1-t03") == topo.domains[UUID1]
    place = topo.placement("nvl-r1-t03")
    assert place is not None and (place.tray, place.spare, place.rack) == (3, False, "rack-1")
    assert topo.problems == () and topo.per_node == ()


def test_cliques_split_a_domain() -> None:
    topo = build_topology(nvl72(racks=1, cliques=2))
    assert topo.clique_of("nvl-r0-t00") == tuple(f"nvl-r0-t{t:02d}" for t in range(9))
    assert topo.clique_of("nvl-r0-t09") == tuple(f"nvl-r0-t{t:02d}" for t in range(9, 18))
    assert list(topo.cliques()) == [Clique(UUID0, 0), Clique(UUID0, 1)]


def test_a_node_without_clique_label_is_per_node_and_counted() -> None:
    labels = nvl72(racks=1)
    labels["plain-a"] = {"kubernetes.io/hostname": "plain-a"}
    labels["plain-b"] = {}
    topo = build_topology(labels)
    assert topo.per_node == ("plain-a", "plain-b")
    assert topo.placement("plain-a") is None and topo.domain_of("plain-a") is None
    assert topo.clique_of("plain-a") == ("plain-a",)
    assert topo.problems == ()


@pytest.mark.parametrize("value", ["", "abc", "abc.", ".3", "abc.x", "abc.-1", "a b.1"])
def test_an_unparseable_clique_label_is_reported_and_per_node(value: str) -> None:
    labels = nvl72(racks=1)
    labels["nvl-r0-t05"][CLIQUE_LABEL] = value
    topo = build_topology(labels)
    assert parse_clique(value) is None
    assert "nvl-r0-t05" in topo.per_node and topo.placement("nvl-r0-t05") is None
    [problem] = topo.problems
    assert problem.kind == "bad_clique" and problem.nodes == ("nvl-r0-t05",)
    assert repr(value) in problem.detail


def test_two_nodes_claiming_one_tray_are_reported_and_neither_believed() -> None:
    labels = nvl72(racks=1)
    labels["nvl-r0-t05"]["remediator.io/tray"] = "4"
    topo = build_topology(labels)
    [problem] = topo.problems
    assert problem.kind == "tray_conflict"
    assert problem.nodes == ("nvl-r0-t04", "nvl-r0-t05")
    for node in problem.nodes:
        place = topo.placement(node)
        assert place is not None and place.tray is None and place.domain == UUID0
    assert topo.domains[UUID0].nodes[-2:] == ("nvl-r0-t04", "nvl-r0-t05")


def test_a_tray_label_that_is_no_slot_number_is_reported() -> None:
    labels = nvl72(racks=1)
    labels["nvl-r0-t05"]["remediator.io/tray"] = "five"
    topo = build_topology(labels)
    [problem] = topo.problems
    assert problem.kind == "bad_tray" and "'five'" in problem.detail
    place = topo.placement("nvl-r0-t05")
    assert place is not None and place.tray is None


def test_rack_label_disagreeing_with_the_cluster_uuid_is_reported() -> None:
    labels = nvl72()
    labels["nvl-r1-t02"]["remediator.io/rack"] = "rack-0"
    topo = build_topology(labels)
    kinds = sorted(p.kind for p in topo.problems)
    assert kinds == ["rack_mismatch", "rack_mismatch", "tray_conflict"]
    assert all("nvl-r1-t02" in p.nodes for p in topo.problems)
    # The clique label is the GPUs' own view: the tray stays in its domain.
    place = topo.placement("nvl-r1-t02")
    assert place is not None and place.domain == UUID1
    assert topo.domains[UUID1].rack is None


def test_label_keys_come_from_settings() -> None:
    keys = TopologySettings(rack_label="example.com/chassis", tray_label="example.com/slot")
    topo = build_topology(
        {"n1": {CLIQUE_LABEL: f"{UUID0}.0", "example.com/chassis": "C1", "example.com/slot": "7"}},
        keys,
    )
    place = topo.placement("n1")
    assert place is not None and (place.rack, place.tray) == ("C1", 7)

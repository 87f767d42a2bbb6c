"""The NVL72 fleet as drawn up: trays named by rack and slot with GPU feature discovery's clique
label and the rack labels, the last slots spare (labelled and tainted), one gang per clique over
its non-spare trays with required pod affinity on the clique label."""

from __future__ import annotations

import pytest

from remediator.sim import nvl72
from remediator.sim.rack import topology


def test_two_racks_one_clique_each() -> None:
    plan = nvl72.plan(2)
    names = [name for name, _ in plan.nodes]
    assert len(names) == 36 and names[0] == "nvl-r0-t00" and names[-1] == "nvl-r1-t17"
    assert plan.gpus_per_node == 4
    labels = plan.node_labels["nvl-r1-t05"]
    uuid1 = nvl72.cluster_uuid(1)
    assert labels == {
        "nvidia.com/gpu.clique": f"{uuid1}.0",
        "remediator.io/rack": "rack-1",
        "remediator.io/tray": "5",
    }
    assert nvl72.cluster_uuid(0) != uuid1
    assert plan.node_labels["nvl-r0-t16"]["remediator.io/spare"] == "true"
    assert plan.node_taints == {
        name: [{"key": "remediator.io/spare", "value": "true", "effect": "NoSchedule"}]
        for name in ("nvl-r0-t16", "nvl-r0-t17", "nvl-r1-t16", "nvl-r1-t17")
    }
    jobs = {w.obj["metadata"]["name"]: w for w in plan.workloads if w.obj}
    assert sorted(jobs) == ["gang-r0-c0", "gang-r1-c0"]
    gang = jobs["gang-r1-c0"]
    assert gang.nodes == [f"nvl-r1-t{i:02d}" for i in range(16)]
    assert gang.obj is not None and gang.obj["spec"]["parallelism"] == 16
    assert gang.obj["spec"]["completionMode"] == "Indexed"
    spec = gang.template["spec"]
    term = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert term == {
        "labelSelector": {"matchLabels": {"remediator.io/gang": "gang-r1-c0"}},
        "topologyKey": "nvidia.com/gpu.clique",
    }
    assert gang.template["metadata"]["labels"]["remediator.io/gang"] == "gang-r1-c0"
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "4"}


def test_cliques_split_the_rack_and_spares_stay_out_of_gangs() -> None:
    plan = nvl72.plan(1, cliques_per_rack=3, spare_trays=1)
    labels = [plan.node_labels[name] for name, _ in plan.nodes]
    cliques = [found["nvidia.com/gpu.clique"].rsplit(".", 1)[1] for found in labels]
    assert cliques == ["0"] * 6 + ["1"] * 6 + ["2"] * 6
    sizes = {w.obj["metadata"]["name"]: len(w.nodes) for w in plan.workloads if w.obj}
    assert sizes == {"gang-r0-c0": 6, "gang-r0-c1": 6, "gang-r0-c2": 5}
    assert topology.parse_tray_name("nvl-r12-t07") == (12, 7)
    assert topology.parse_tray_name("h100-train-0001") is None


@pytest.mark.parametrize(
    ("racks", "cliques", "spares", "wrong"),
    [(0, 1, 2, "racks"), (1, 0, 2, "cliques"), (1, 19, 2, "cliques"), (1, 1, 18, "spare")],
)
def test_impossible_layouts_are_refused(racks: int, cliques: int, spares: int, wrong: str) -> None:
    with pytest.raises(ValueError, match=wrong):
        nvl72.layout(racks, cliques, spares)

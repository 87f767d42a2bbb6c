"""The simulated scheduler's filters and scoring as pure functions: readiness, cordon (with
the unschedulable toleration special case), taints, nodeSelector, free GPUs, spreading, and
all-or-nothing gang placement."""

from __future__ import annotations

from typing import Any

from remediator.sim.kube.api.kobj import GPU_RESOURCE
from remediator.sim.kube.api.store import Obj
from remediator.sim.kube.controllers.scheduling import NodeView, Usage, pick_node, place_gang


def node(name: str, **overrides: Any) -> NodeView:
    fields: dict[str, Any] = {
        "name": name,
        "ready": True,
        "unschedulable": False,
        "taints": (),
        "labels": {"pool": "a"},
        "gpus": 8,
        "max_pods": 110,
    }
    fields.update(overrides)
    return NodeView(**fields)


def pod(name: str = "p", gpus: int = 1, **spec: Any) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}],
            **spec,
        },
    }


def test_filters_explain_why_no_node_fits() -> None:
    nodes = [
        node("cordoned", unschedulable=True),
        node("down", ready=False),
        node("tainted", taints=({"key": "gpu", "value": "bad", "effect": "NoSchedule"},)),
        node("elsewhere", labels={"pool": "b"}),
        node("full"),
    ]
    usage = Usage()
    usage.add("full", 8, None)
    chosen, message = pick_node(pod(nodeSelector={"pool": "a"}), nodes, usage, None)
    assert chosen is None
    assert message == (
        "0/5 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's "
        "node affinity/selector, 1 node(s) had untolerated taint {gpu: bad}, 1 node(s) were not "
        "ready, 1 node(s) were unschedulable."
    )


def test_tolerations_open_tainted_and_cordoned_nodes() -> None:
    tolerant = pod(
        tolerations=[
            {"key": "gpu", "operator": "Exists"},
            {
                "key": "node.kubernetes.io/unschedulable",
                "operator": "Exists",
                "effect": "NoSchedule",
            },
        ]
    )
    tainted = node("tainted", taints=({"key": "gpu", "value": "bad", "effect": "NoExecute"},))
    assert pick_node(tolerant, [tainted], Usage(), None)[0] == "tainted"
    assert (
        pick_node(tolerant, [node("cordoned", unschedulable=True)], Usage(), None)[0] == "cordoned"
    )
    assert pick_node(pod(), [tainted], Usage(), None)[0] is None


def test_prefers_spreading_a_controllers_pods_then_least_allocated_then_name() -> None:
    nodes = [node("n1"), node("n2"), node("n3")]
    usage = Usage()
    usage.add("n1", 1, "rs")
    usage.add("n2", 4, "other")
    assert pick_node(pod(), nodes, usage, "rs")[0] == "n3"
    usage.add("n3", 1, "rs")
    assert pick_node(pod(), nodes, usage, "rs")[0] == "n2"
    assert pick_node(pod(), nodes, usage, "fresh")[0] == "n1"


def test_a_gang_is_placed_whole_or_not_at_all() -> None:
    nodes = [node("n1"), node("n2"), node("n3")]
    usage = Usage()
    usage.add("n3", 1, None)
    members = [pod(f"m{i}", gpus=8) for i in range(3)]
    placement, message = place_gang(members, nodes, usage, "job")
    assert placement is None
    assert message.startswith("gang of 3 does not fit: 0/3 nodes are available")
    assert usage.gpus.get("n1", 0) == 0 and usage.gpus.get("n2", 0) == 0
    placement, _ = place_gang(members[:2], nodes, usage, "job")
    assert placement == {"m0": "n1", "m1": "n2"}


def clique_pod(name: str) -> Obj:
    term = {"labelSelector": {"matchLabels": {"gang": "g"}}, "topologyKey": "clique"}
    return pod(
        name,
        gpus=4,
        affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
    )


def test_gang_with_pod_affinity_goes_whole_into_one_clique() -> None:
    # Clique "a" has two free trays, "b" three: a gang of three fits only in "b", although
    # the first tray by name is in "a"; a node without the label is no domain at all.
    nodes = [node(f"a{i}", labels={"clique": "a"}, gpus=4) for i in range(2)]
    nodes += [node(f"b{i}", labels={"clique": "b"}, gpus=4) for i in range(3)]
    nodes.append(node("loose", labels={}, gpus=4))
    members = [clique_pod(f"m{i}") for i in range(3)]
    placement, _ = place_gang(members, nodes, Usage(), "job")
    assert placement is not None
    assert sorted(placement.values()) == ["b0", "b1", "b2"]
    # Two fit in either: the fuller clique (fewest free trays that still fit) is taken first.
    placement, _ = place_gang(members[:2], nodes, Usage(), "job")
    assert placement is not None
    assert sorted(placement.values()) == ["a0", "a1"]
    # Four fit in no clique although six trays are free: the gang stays pending, said why.
    members.append(clique_pod("m3"))
    placement, message = place_gang(members, nodes, Usage(), "job")
    assert placement is None
    assert message.startswith(
        "gang of 4 does not fit in any one clique domain (at most 3 fitting nodes in one of 2)"
    )

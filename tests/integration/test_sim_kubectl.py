"""Stock kubectl against the real `remediator sim serve`: if kubectl cannot tell the simulator
from a real cluster for these commands, neither can remediator's kube layer."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from tests.fixtures.sim import SimHandle, start_sim
from tests.integration.engine_support import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    # Eight nodes: six training, two inference, so every inference Deployment has two
    # replicas on one node and its budget (one disruption at a time) makes drain wait.
    handle = start_sim(tmp_path_factory.mktemp("sim-kubectl"), nodes=8)
    yield handle
    handle.stop()


def rows(output: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in output.strip().splitlines()]


def node_json(cluster: SimHandle, name: str) -> dict[str, object]:
    parsed: dict[str, object] = json.loads(cluster.kubectl("get", "node", name, "-o", "json"))
    return parsed


def training_node(cluster: SimHandle, index: int) -> str:
    names = cluster.kubectl(
        "get", "nodes", "-l", "simcloud.io/nodepool=h100-train", "-o", "name"
    ).split()
    return names[index].removeprefix("node/")


def test_get_nodes(cluster: SimHandle) -> None:
    table = rows(cluster.kubectl("get", "nodes"))
    assert table[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert len(table) == 9
    assert all(row[1] == "Ready" for row in table[1:])
    wide = rows(cluster.kubectl("get", "nodes", "-o", "wide"))
    assert wide[0][:7] == [
        "NAME",
        "STATUS",
        "ROLES",
        "AGE",
        "VERSION",
        "INTERNAL-IP",
        "EXTERNAL-IP",
    ]
    by_name = cluster.kubectl("get", "no", training_node(cluster, 0), "--no-headers")
    assert by_name.split()[0] == training_node(cluster, 0)


def test_get_pods_all_namespaces_wide(cluster: SimHandle) -> None:
    table = rows(cluster.kubectl("get", "pods", "-A", "-o", "wide"))
    assert table[0][:8] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    namespaces = {row[0] for row in table[1:]}
    assert {"gpu-operator", "kube-system", "training", "inference"} <= namespaces
    assert all(row[3] in ("Running", "Pending", "ContainerCreating") for row in table[1:])
    node = training_node(cluster, 0)
    on_node = rows(
        cluster.kubectl(
            "get",
            "po",
            "-A",
            "--field-selector",
            f"spec.nodeName={node}",
            "-o",
            "wide",
            "--no-headers",
        )
    )
    assert on_node and all(row[7] == node for row in on_node)


def test_discovery(cluster: SimHandle) -> None:
    resources = {row[0]: row for row in rows(cluster.kubectl("api-resources", "--no-headers"))}
    assert resources["nodes"][1:4] == ["no", "v1", "false"]
    assert resources["poddisruptionbudgets"][1:4] == ["pdb", "policy/v1", "true"]
    assert resources["leases"][1:3] == ["coordination.k8s.io/v1", "true"]
    assert "v1.32" in cluster.kubectl("version", "-o", "json")


def test_get_other_kinds(cluster: SimHandle) -> None:
    assert rows(cluster.kubectl("get", "pdb", "-n", "inference"))[0] == [
        "NAME",
        "MIN AVAILABLE",
        "MAX UNAVAILABLE",
        "ALLOWED DISRUPTIONS",
        "AGE",
    ]
    assert "nvidia-dcgm-exporter" in cluster.kubectl("get", "ds", "-A")
    assert "pretrain" in cluster.kubectl("get", "jobs", "-n", "training")
    assert "inference" in cluster.kubectl("get", "ns")
    assert rows(cluster.kubectl("get", "rs", "-n", "inference"))[0][:4] == [
        "NAME",
        "DESIRED",
        "CURRENT",
        "READY",
    ]


def test_cordon_uncordon(cluster: SimHandle) -> None:
    node = training_node(cluster, 1)
    assert "cordoned" in cluster.kubectl("cordon", node)
    status = rows(cluster.kubectl("get", "node", node, "--no-headers"))[0][1]
    assert status == "Ready,SchedulingDisabled"
    assert "uncordoned" in cluster.kubectl("uncordon", node)
    assert rows(cluster.kubectl("get", "node", node, "--no-headers"))[0][1] == "Ready"


def test_label_and_taint(cluster: SimHandle) -> None:
    node = training_node(cluster, 2)
    cluster.kubectl("label", "node", node, "remediator.io/state=quarantined")
    labelled = cluster.kubectl(
        "get", "nodes", "-l", "remediator.io/state=quarantined", "-o", "name"
    )
    assert labelled.split() == [f"node/{node}"]
    cluster.kubectl("taint", "node", node, "remediator.io/quarantine=xid-79:NoSchedule")
    taints = node_json(cluster, node)["spec"]["taints"]  # type: ignore[index]
    assert {"key": "remediator.io/quarantine", "value": "xid-79", "effect": "NoSchedule"} in taints
    cluster.kubectl("taint", "node", node, "remediator.io/quarantine:NoSchedule-")
    cluster.kubectl("label", "node", node, "remediator.io/state-")
    after = node_json(cluster, node)
    assert "remediator.io/state" not in after["metadata"]["labels"]  # type: ignore[index]
    assert not any(t["key"] == "remediator.io/quarantine" for t in after["spec"].get("taints", []))  # type: ignore[attr-defined]


def test_drain_retries_while_budget_forbids(cluster: SimHandle) -> None:
    """Two replicas of one Deployment on the drained node: the second eviction is refused
    (429) until the first one's replacement runs on the other node, and kubectl retries."""
    pods = json.loads(cluster.kubectl("get", "pods", "-n", "inference", "-o", "json"))["items"]
    counts: dict[tuple[str, str], int] = {}
    for pod in pods:
        key = (pod["spec"]["nodeName"], pod["metadata"]["ownerReferences"][0]["name"])
        counts[key] = counts.get(key, 0) + 1
    (node, _), doubled = max(counts.items(), key=lambda item: item[1])
    assert doubled >= 2
    done = cluster.kubectl(
        "drain",
        node,
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=120s",
        timeout=150,
        check=False,
    )
    assert "Cannot evict pod as it would violate the pod's disruption budget" in done
    assert "will retry after 5s" in done
    assert f"node/{node} drained" in done
    left = cluster.kubectl(
        "get", "pods", "-n", "inference", "--field-selector", f"spec.nodeName={node}", check=False
    )
    assert "No resources found" in left
    replacements = json.loads(cluster.kubectl("get", "pods", "-n", "inference", "-o", "json"))[
        "items"
    ]
    assert len(replacements) >= len(pods) - 1
    assert rows(cluster.kubectl("get", "node", node, "--no-headers"))[0][1] == (
        "Ready,SchedulingDisabled"
    )
    again = cluster.kubectl("drain", node, "--ignore-daemonsets", "--timeout=10s", timeout=30)
    assert f"node/{node} drained" in again


def test_events_and_wait(cluster: SimHandle) -> None:
    # An event of this test's own (the tests of this module may run on other workers' sims).
    manifest = cluster.workdir / "too-big.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: too-big\n  namespace: training\n"
        "spec:\n  containers:\n  - name: c\n    image: busybox\n    resources:\n"
        "      limits:\n        nvidia.com/gpu: 99\n"
    )
    cluster.kubectl("create", "-f", str(manifest))
    wait_for(
        lambda: "too-big" in cluster.kubectl("get", "events", "-n", "training"),
        what="the scheduler's event for a pod no node can take",
    )
    events = rows(cluster.kubectl("get", "events", "-A"))
    assert events[0][:5] == ["NAMESPACE", "LAST SEEN", "TYPE", "REASON", "OBJECT"]
    node = training_node(cluster, 3)
    out = cluster.kubectl("wait", "--for=condition=Ready", f"node/{node}", "--timeout=20s")
    assert "condition met" in out
    cluster.kubectl("delete", "pod", "too-big", "-n", "training")


def test_create_and_apply_manifests(cluster: SimHandle) -> None:
    """kubectl validates on the server only when OpenAPI v3 says the kind supports it."""
    manifest = cluster.workdir / "budget.yaml"
    budget = (
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: applied\n"
        "  namespace: training\nspec:\n  {field}: 1\n  selector:\n    matchLabels:\n"
        "      app.kubernetes.io/name: trainer\n"
    )
    manifest.write_text(budget.format(field="maxUnavailable"))
    assert "created" in cluster.kubectl("apply", "-f", str(manifest))
    manifest.write_text(budget.format(field="minAvailable"))
    assert "configured" in cluster.kubectl("apply", "-f", str(manifest))
    applied = json.loads(cluster.kubectl("get", "pdb", "applied", "-n", "training", "-o", "json"))
    assert applied["spec"]["minAvailable"] == 1 and "maxUnavailable" not in applied["spec"]
    assert applied["metadata"]["generation"] == 2
    lease = cluster.workdir / "lease.yaml"
    lease.write_text(
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: by-kubectl\n"
        "  namespace: remediator\nspec:\n  holderIdentity: someone\n"
    )
    assert "created" in cluster.kubectl("create", "-f", str(lease))
    assert "someone" in cluster.kubectl("get", "lease", "-n", "remediator")

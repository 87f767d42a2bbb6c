"""Pods created through the simulated API server get what a real server's defaulting and
admission add, as stock kubectl shows it; above all the 300 s NotReady/unreachable tolerations,
without which a hand-made pod would be evicted the moment its node went NotReady. A pod bound by
`nodeName` skips the scheduler, so the kubelet's own admission holds the node's GPUs to what it
has, as a real kubelet does."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.fixtures.sim import KubectlError, SimHandle
from tests.integration.actions_support import wait_for

pytestmark = pytest.mark.integration

NODE = "a100-infer-0000"
POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: {node}
  {extra}
  containers:
  - name: main
    image: busybox:1.36
    resources: {{limits: {{cpu: "1", memory: 1Gi}}}}
"""
GPU_POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  nodeName: {node}
  tolerations: [{{operator: Exists}}]
  containers:
  - name: main
    image: busybox:1.36
    resources: {{limits: {{nvidia.com/gpu: "{gpus}"}}}}
"""
IMPATIENT = (
    "tolerations: [{key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, "
    "tolerationSeconds: 0}]"
)


def create(sim: SimHandle, name: str, extra: str = "") -> None:
    manifest = sim.workdir / f"{name}.yaml"
    manifest.write_text(POD.format(name=name, node=NODE, extra=extra))
    sim.kubectl("create", "-f", str(manifest))


def pod(sim: SimHandle, name: str) -> dict[str, Any] | None:
    out = sim.kubectl("get", "pod", name, "-o", "json", "--ignore-not-found")
    return json.loads(out) if out.strip() else None


def test_kubectl_sees_the_defaults_and_the_pod_outlives_a_not_ready_node(sim: SimHandle) -> None:
    create(sim, "by-hand")
    create(sim, "impatient", IMPATIENT)
    shown = sim.kubectl("get", "pod", "by-hand", "-o", "yaml")
    for line in (
        "dnsPolicy: ClusterFirst",
        "enableServiceLinks: true",
        "preemptionPolicy: PreemptLowerPriority",
        "priority: 0",
        "restartPolicy: Always",
        "schedulerName: default-scheduler",
        "serviceAccountName: default",
        "terminationGracePeriodSeconds: 30",
        "imagePullPolicy: IfNotPresent",
        "terminationMessagePath: /dev/termination-log",
        "qosClass: Guaranteed",
    ):
        assert line in shown, line
    spec = (pod(sim, "by-hand") or {})["spec"]
    assert spec["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert {(t["key"], t["effect"], t.get("tolerationSeconds")) for t in spec["tolerations"]} == {
        ("node.kubernetes.io/not-ready", "NoExecute", 300),
        ("node.kubernetes.io/unreachable", "NoExecute", 300),
    }
    impatient = (pod(sim, "impatient") or {})["spec"]["tolerations"]
    assert [t["key"] for t in impatient] == [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ]
    assert impatient[0]["tolerationSeconds"] == 0

    fault = {"type": "condition", "node": NODE, "condition": "Ready", "status": "False"}
    httpx.post(f"{sim.inject_url}/v1/faults", json=fault, timeout=5).raise_for_status()

    # The taint manager evicts the pod whose own toleration ran out at once; in the same pass it
    # leaves the defaulted one alone for its 300 s.
    def impatient_evicted() -> bool:
        found = pod(sim, "impatient")
        return found is None or "deletionTimestamp" in found["metadata"]

    wait_for(impatient_evicted, 30, "the pod without patience evicted")
    survivor = pod(sim, "by-hand")
    assert survivor is not None and "deletionTimestamp" not in survivor["metadata"]


def test_an_unknown_priority_class_is_refused(sim: SimHandle) -> None:
    with pytest.raises(KubectlError, match="no PriorityClass with name gold was found"):
        create(sim, "golden", "priorityClassName: gold")
    assert pod(sim, "golden") is None


def gpus_held(sim: SimHandle, node: str) -> int:
    listed = sim.kubectl(
        "get", "pods", "-A", "--field-selector", f"spec.nodeName={node}", "-o", "json"
    )
    return sum(
        int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
        for p in json.loads(listed)["items"]
        if p["status"].get("phase") not in ("Succeeded", "Failed")
        for c in p["spec"]["containers"]
    )


def test_the_kubelet_refuses_a_pod_bound_by_node_name_past_the_nodes_gpus(sim: SimHandle) -> None:
    node = json.loads(sim.kubectl("get", "node", NODE, "-o", "json"))
    capacity = int(node["status"]["allocatable"]["nvidia.com/gpu"])
    free = capacity - gpus_held(sim, NODE)
    for name, gpus in (("fills-it", free), ("one-too-many", 1)):
        if gpus:
            manifest = sim.workdir / f"{name}.yaml"
            manifest.write_text(GPU_POD.format(name=name, node=NODE, gpus=gpus))
            sim.kubectl("create", "-f", str(manifest))
        if name == "fills-it" and gpus:
            wait_for(lambda: (pod(sim, "fills-it") or {})["status"].get("phase") == "Running", 30)

    def phase() -> str:
        return str((pod(sim, "one-too-many") or {}).get("status", {}).get("phase"))

    wait_for(lambda: phase() in ("Running", "Failed"), 30, "the kubelet's answer")
    status = (pod(sim, "one-too-many") or {})["status"]
    assert status["phase"] == "Failed", status
    assert status["reason"] == "OutOfnvidia.com/gpu"
    assert status["message"] == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, "
        f"requested: 1, used: {capacity}, capacity: {capacity}"
    )
    events = json.loads(sim.kubectl("get", "events", "-n", "default", "-o", "json"))["items"]
    assert any(
        e["involvedObject"]["name"] == "one-too-many"
        and e["type"] == "Warning"
        and e["reason"] == "OutOfnvidia.com/gpu"
        for e in events
    ), events

"""The quarantined machine's marks on Cluster API and Metal3 objects, against the simulator's
API server and read back with stock kubectl: the Machine (while it exists) and the BareMetalHost
behind a `metal3://` providerID get the hold, the host also the label a Metal3MachineTemplate's
hostSelector keeps from being chosen again; objects already gone are skipped."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from remediator.kube.client import KubeClient
from remediator.providers.clusterapi import (
    HOLD_KEY,
    HOLD_REASON,
    MACHINE_ANNOTATION,
    NAMESPACE_ANNOTATION,
    hold_machine,
)
from tests.fixtures.sim import SimHandle

pytestmark = pytest.mark.integration

HOST = """{
  "apiVersion": "metal3.io/v1alpha1",
  "kind": "BareMetalHost",
  "metadata": {"name": "host-7", "namespace": "default", "labels": {"rack": "r1"}},
  "spec": {"online": true, "bootMACAddress": "00:5c:52:31:3a:9c"}
}"""


def test_a_held_machine_marks_its_machine_and_its_bare_metal_host(
    sim_factory: Callable[..., SimHandle],
) -> None:
    sim = sim_factory(nodes=2, provision_delay=0.3, cloud="clusterapi")
    manifest = sim.workdir / "host.json"
    manifest.write_text(HOST)
    sim.kubectl("apply", "-f", str(manifest))
    kube = KubeClient.from_kubeconfig(sim.kubeconfig, timeout=10.0)
    node = sorted(kube.list_nodes(), key=lambda n: n.name)[0]
    machine = node.annotations[MACHINE_ANNOTATION]
    namespace = node.annotations.get(NAMESPACE_ANNOTATION, "default")

    marked = hold_machine(
        kube,
        node.name,
        "metal3://default/host-7/m3m-7",
        node.annotations,
        "failed validation 3 times within 30d",
    )

    assert marked == [f"Machine {namespace}/{machine}", "BareMetalHost default/host-7"]
    host = json.loads(sim.kubectl("get", "baremetalhost", "host-7", "-o", "json"))
    assert host["metadata"]["labels"] == {"rack": "r1", HOLD_KEY: "true"}
    assert host["metadata"]["annotations"][HOLD_REASON] == "failed validation 3 times within 30d"
    assert host["spec"]["online"] is True  # a merge patch: the host's own spec is kept
    held = json.loads(
        sim.kubectl("get", "machines.cluster.x-k8s.io", machine, "-n", namespace, "-o", "json")
    )
    assert held["metadata"]["annotations"][HOLD_KEY] == "true"
    # Selected away by the label, as a Metal3MachineTemplate's hostSelector would.
    free = sim.kubectl("get", "bmh", "-l", f"!{HOLD_KEY}", "-o", "name")
    assert "host-7" not in free

    # The replacement deleted the Machine and the host was deprovisioned away: nothing to mark,
    # nothing raised.
    assert (
        hold_machine(kube, "gone", "metal3://default/host-9/m3m-9", {MACHINE_ANNOTATION: "x"}, "r")
        == []
    )

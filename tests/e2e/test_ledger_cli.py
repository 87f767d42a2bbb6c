"""The hardware ledger's done-when (issue #28) through the real processes: `remediator run`
against `remediator sim serve`, XIDs pushed to the controller's API as the node agent pushes
them (with the UUIDs, PCI addresses and DMI serial the simulator's hardware reports), and the
ledger read back through the API.

* node-pool HTTP: a GPU that fails again after its machine was repaired and came back under a
  new node name is the same GPU: its second failure within the window goes straight to an RMA
  case and a replacement, and its machine is quarantined; a different GPU behind the same node
  name is no repeat. A node on the quarantined machine is left fenced with the quarantine as
  its hold reason until an operator lifts it. The quarantined host reinstalled under yet
  another node name is fenced on arrival, before any XID, from its real agent's heartbeat
  (`remediator agent`, the DMI serial read below its --host-root). The RMA case carries a
  complete bundle and is moved through its states by the API (a repeated move changes
  nothing).
* GCE: an instance recreated under its own name is new hardware: a new machine in the ledger,
  its GPUs new GPUs, and a fault on them is no repeat of the old machine's."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.actions.quarantine import ANN_MACHINE_HOLD, QUARANTINE_TAINT
from remediator.model.states import State
from remediator.rma.bundle import PARTS
from remediator.sim.node.hosts import DMI_SERIAL
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import (
    OPERATOR_HEADERS,
    ControllerProcess,
    write_process_config,
)

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(600)]

POLICIES = """
policies:
  - name: xid-79-repeated
    description: The same GPU fell off the bus again within a week, on whatever node it sits.
    why: A repeat is hardware; send the GPU back and replace the machine.
    match:
      kind: xid
      codes: [79]
      repeat: {by: gpu, count: 2, within: 7d, of: [xid-79-first, xid-79-repeated]}
    priority: 101
    actions:
      - action: cordon
      - action: drain
        timeout: 5s
        on_timeout: force
      - action: rma
      - action: replace
  - name: xid-79-first
    description: A GPU fell off the bus; the first time, the machine is checked in place.
    why: XID 79 - restart the machine; only a repeat is hardware.
    match:
      kind: xid
      codes: [79]
    priority: 100
    actions:
      - action: cordon
      - action: drain
        timeout: 5s
        on_timeout: force
      - action: diagnose
        level: 1
      - action: uncordon
"""
# The GCE test's: the first fault replaces, and a repeat counts by machine, so a fault behind
# the same node name is a repeat only if the machine is the same.
REPLACING_FIRST = POLICIES.replace(
    "      - action: diagnose\n        level: 1\n      - action: uncordon\n",
    "      - action: replace\n",
).replace("by: gpu", "by: machine")
SETTINGS = """
max_unhealthy: {per_pool: {percent: 100}, cluster: {percent: 100}}
max_concurrent: 50
storm_breaker: {enabled: false}
default_cooldown: 0s
"""
WAIT = 180.0
DCGM = re.compile(
    r'^DCGM_FI_DEV_GPU_TEMP\{gpu="(?P<gpu>\d+)",UUID="(?P<uuid>[^"]+)",'
    r'pci_bus_id="(?P<pci>[^"]+)",.*Hostname="(?P<node>[^"]+)"'
)


def configure(tmp_path: Path, sim: SimHandle, database_url: str, policies: str) -> Path:
    config = write_process_config(tmp_path, sim, database_url)
    (tmp_path / "policies" / "gpu.yaml").write_text(policies)
    (tmp_path / "policies" / "settings.yaml").write_text(SETTINGS)
    return config


def gpus_of(sim: SimHandle, node: str) -> dict[int, tuple[str, str]]:
    """GPU index → (UUID, PCI bus id) as the simulator's DCGM exporter reports them."""
    text = httpx.get(f"{sim.metrics_url}/metrics", timeout=30).text
    found: dict[int, tuple[str, str]] = {}
    for line in text.splitlines():
        match = DCGM.match(line)
        if match and match["node"] == node:
            found[int(match["gpu"])] = (match["uuid"], match["pci"])
    assert found, f"no DCGM series for {node}"
    return found


def push_xid(
    controller: ControllerProcess,
    node: str,
    gpu: int,
    uuid: str,
    pci: str,
    dmi_serial: str | None = None,
) -> None:
    """XID 79 as the node agent pushes it from the kernel log, with what it read of the host."""
    labels = {"pci": pci, **({"dmi_serial": dmi_serial} if dmi_serial else {})}
    signal = {
        "node": node,
        "kind": "xid",
        "source": "agent",
        "observed_at": datetime.now(UTC).isoformat(),
        "gpu": gpu,
        "gpu_uuid": uuid,
        "code": 79,
        "labels": labels,
    }
    url = f"{controller.web_url}/api/v1/signals"
    answer = httpx.post(url, json=[signal], headers=OPERATOR_HEADERS, timeout=30)
    assert answer.status_code == 202, answer.text


def api(controller: ControllerProcess, path: str) -> Any:
    response = httpx.get(f"{controller.web_url}{path}", headers=OPERATOR_HEADERS, timeout=30)
    assert response.status_code == 200, f"{path}: {response.status_code} {response.text}"
    return response.json()


def remediations(controller: ControllerProcess, node: str) -> list[dict[str, Any]]:
    found = api(controller, f"/api/v1/remediations?node={node}&limit=50")
    items: list[dict[str, Any]] = found["items"]
    return sorted(items, key=lambda r: int(r["id"]))


def wait_for(what: str, check: Callable[[], Any], controller: ControllerProcess) -> Any:
    deadline = time.monotonic() + WAIT
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT:g}s: {what}\n{controller.log_tail()}")
        time.sleep(0.3)
    return found


def finished(
    controller: ControllerProcess, node: str, count: int, state: State = State.SUCCEEDED
) -> dict[str, Any]:
    """The node's `count`th remediation once it reached `state`."""

    def reached() -> dict[str, Any] | None:
        found = remediations(controller, node)
        if len(found) >= count and found[count - 1]["state"] == state.value:
            return found[count - 1]
        return None

    result: dict[str, Any] = wait_for(f"{node} remediation {count} {state}", reached, controller)
    return result


def rejoin(
    sim: SimHandle, controller: ControllerProcess, tmp_path: Path, node: str, serial: str
) -> None:
    """`remediator agent` for `node` on a host whose DMI serial is the held machine's (the
    node's own host directory, copied, with that serial): fenced on arrival, no remediation."""
    before = json.loads(sim.kubectl("get", "node", node, "-o", "json"))
    assert not before["spec"].get("unschedulable"), "fenced before its agent said anything"
    host = tmp_path / "reinstalled" / node
    shutil.copytree(tmp_path / "nodes" / node, host)
    (host / DMI_SERIAL).write_text(serial + "\n")
    with (tmp_path / f"agent-{node}.log").open("ab") as log:
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "remediator",
                "agent",
                "--node",
                node,
                "--controller-url",
                controller.web_url,
                "--state-dir",
                str(tmp_path / "agent-state" / node),
                "--host-root",
                str(host),
                "--kmsg",
                str(host / "dev/kmsg"),
                "--expected-gpus",
                str(len(gpus_of(sim, node))),
                "--heartbeat-interval",
                "2",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "REMEDIATOR_AGENT_TOKEN": OPERATOR_HEADERS["Authorization"][7:]},
        )
    try:

        def fenced() -> dict[str, Any] | None:
            found = json.loads(sim.kubectl("get", "node", node, "-o", "json"))
            taints = {t["key"] for t in found["spec"].get("taints") or []}
            done = found["spec"].get("unschedulable") and QUARANTINE_TAINT.key in taints
            return found if done else None

        found = wait_for(f"{node} fenced on arrival", fenced, controller)
    finally:
        agent.terminate()
        agent.wait(timeout=60)
    assert found["metadata"]["annotations"][ANN_MACHINE_HOLD] == f"dmi:{serial}"
    machine = api(controller, f"/api/v1/machines/dmi:{serial}")
    # Once, on this name (its first name, still the machine's in the ledger, was fenced too).
    assert [h["node"] for h in machine["holds"] if h["kind"] == "fenced"].count(node) == 1
    assert machine["nodes"][0]["node"] == node
    assert {p["node"] for p in machine["placements"] if p["to_at"] is None} >= {node}
    assert remediations(controller, node) == []  # no XID: fenced on arrival


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_a_gpu_followed_across_node_names_to_replacement_quarantine_and_rma(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> None:
    sim = sim_factory(nodes=4, node_root=tmp_path / "nodes", provision_delay=0.5)
    listed = sorted(
        n.removeprefix("node/") for n in sim.kubectl("get", "nodes", "-o", "name").split()
    )
    first, second, rejoined = listed[:3]
    serial = (tmp_path / "nodes" / first / "sys/class/dmi/id/product_serial").read_text().strip()
    gpus = gpus_of(sim, first)
    (faulty, faulty_pci), (other, other_pci) = gpus[0], gpus[1]
    config = configure(tmp_path / "run", sim, migrated_database_url, POLICIES)
    controller = ControllerProcess(tmp_path / "run", config, "controller").wait_ready()
    try:
        # The first fall off the bus: repaired in place.
        push_xid(controller, first, 0, faulty, faulty_pci, serial)
        repaired = finished(controller, first, 1)
        assert repaired["policy"] == "xid-79-first"
        # Another GPU behind the same node name: no repeat, repaired in place too.
        push_xid(controller, first, 1, other, other_pci, serial)
        assert finished(controller, first, 2)["policy"] == "xid-79-first"
        # The machine comes back under another name (its agent reads the same DMI serial) and
        # the first GPU falls off the bus again: the same GPU, straight to RMA and replacement.
        push_xid(controller, second, 0, faulty, faulty_pci, serial)
        replaced = finished(controller, second, 1)
        assert replaced["policy"] == "xid-79-repeated"
        assert replaced["new_node"] and replaced["new_node"] != second

        life = api(controller, f"/api/v1/gpus/{faulty}")
        assert [p["node"] for p in life["placements"]] == [first, second]
        assert {p["machine_id"] for p in life["placements"]} == {f"dmi:{serial}"}
        assert life["faults_by_xid"] == {"79": 2}
        linked = sorted(r["remediation_id"] for r in life["remediations"])
        assert linked == [repaired["id"], replaced["id"]]
        machine = api(controller, f"/api/v1/machines/dmi:{serial}")
        assert machine["quarantined_at"] is not None
        assert f"remediation #{replaced['id']}" in machine["quarantine_reason"]
        # The held host reinstalled by hand under another node name: its real agent's first
        # heartbeat names the DMI serial, and the node is fenced before any XID.
        rejoin(sim, controller, tmp_path, rejoined, serial)
        # Its first node name still there (bare metal, node-pool HTTP): a repair of another GPU
        # on the quarantined machine is never returned to service: held fenced, saying why.
        third, third_pci = gpus[2]
        push_xid(controller, first, 2, third, third_pci, serial)
        held = finished(controller, first, 3, State.HELD)
        assert held["hold_reason"].startswith(f"quarantined machine dmi:{serial}")
        fenced = json.loads(sim.kubectl("get", "node", first, "-o", "json"))
        assert fenced["spec"].get("unschedulable") is True
        # An operator lifts the quarantine and releases the remediation: the node goes back.
        lifted = httpx.post(
            f"{controller.web_url}/api/v1/machines/dmi:{serial}/lift-quarantine",
            json={"reason": "board swapped and burnt in"},
            headers=OPERATOR_HEADERS,
            timeout=30,
        )
        assert lifted.status_code == 200, lifted.text
        assert lifted.json()["quarantined_at"] is None
        released = httpx.post(
            f"{controller.web_url}/api/v1/remediations/{held['id']}/release",
            json={"reason": "quarantine lifted"},
            headers=OPERATOR_HEADERS,
            timeout=30,
        )
        assert released.status_code == 200, released.text
        finished(controller, first, 3)
        back = json.loads(sim.kubectl("get", "node", first, "-o", "json"))
        assert not back["spec"].get("unschedulable")

        other_life = api(controller, f"/api/v1/gpus/{other}")
        assert [p["node"] for p in other_life["placements"]] == [first]
        assert other_life["faults_by_xid"] == {"79": 1}

        # The RMA case: opened with a complete bundle, moved through its states by the API.
        case = api(controller, f"/api/v1/rma/{faulty}")
        assert case["target"] == "gpu" and case["hardware_id"] == faulty
        assert case["status"] == "opened" and case["remediation_id"] == replaced["id"]
        archive = httpx.get(
            f"{controller.web_url}/api/v1/rma/{case['id']}/bundle",
            headers=OPERATOR_HEADERS,
            timeout=30,
        )
        assert archive.status_code == 200
        with tarfile.open(fileobj=io.BytesIO(archive.content), mode="r:gz") as tar:
            names = {Path(m.name).name: m for m in tar.getmembers()}
            assert set(PARTS.values()) <= set(names), sorted(names)
            placements = json.loads(tar.extractfile(names["placements.json"]).read())  # type: ignore[union-attr]
            timelines = json.loads(tar.extractfile(names["timelines.json"]).read())  # type: ignore[union-attr]
            hardware = json.loads(tar.extractfile(names["hardware.json"]).read())  # type: ignore[union-attr]
        assert [p["node"] for p in placements] == [first, second]
        assert {t["remediation_id"] for t in timelines} >= {repaired["id"], replaced["id"]}
        assert hardware["ledger"]["uuid"] == faulty
        assert hardware["ledger"]["faults_by_xid"] == {"79": 2}
        moves = ["acknowledged", "shipped", "shipped", "replaced", "closed"]
        changed = []
        for status in moves:
            response = httpx.patch(
                f"{controller.web_url}/api/v1/rma/{case['id']}",
                json={"status": status, "note": f"vendor: {status}"},
                headers=OPERATOR_HEADERS,
                timeout=30,
            )
            assert response.status_code == 200, response.text
            changed.append(response.json()["changed"])
        assert changed == [True, True, False, True, True]
        back = httpx.patch(
            f"{controller.web_url}/api/v1/rma/{case['id']}",
            json={"status": "shipped"},
            headers=OPERATOR_HEADERS,
            timeout=30,
        )
        assert back.status_code == 409
        closed = api(controller, f"/api/v1/rma/{case['id']}")
        assert [h["status"] for h in closed["history"]] == [
            "opened",
            "acknowledged",
            "shipped",
            "replaced",
            "closed",
        ]
    finally:
        controller.stop()


@pytest.mark.parametrize("migrated_database_url", ["sqlite"], indirect=True)
def test_a_gce_instance_recreated_under_its_name_is_new_hardware(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> None:
    sim = sim_factory(nodes=3, provision_delay=0.5, cloud="gce")
    node = "h100-train-0000"
    old_gpus = gpus_of(sim, node)
    config = configure(tmp_path / "run", sim, migrated_database_url, REPLACING_FIRST)
    controller = ControllerProcess(tmp_path / "run", config, "controller").wait_ready()
    try:
        uuid, pci = old_gpus[0]
        push_xid(controller, node, 0, uuid, pci)
        done = finished(controller, node, 1)
        assert done["policy"] == "xid-79-first" and done["new_node"] == node
        new_gpus = wait_for(
            "the recreated instance's GPUs",
            lambda: (found := gpus_of(sim, node))[0][0] != uuid and found,
            controller,
        )
        assert new_gpus[0][1] == pci  # the same slot on the new board, another GPU in it
        # The same node name, a new machine: the new GPU's fault in the same slot, within the
        # fold window, is another GPU's (by its UUID), and no repeat by machine (by node name
        # it would be one).
        other_uuid, other_pci = new_gpus[0]
        push_xid(controller, node, 0, other_uuid, other_pci)
        again = finished(controller, node, 2)
        assert again["policy"] == "xid-79-first"

        old = api(controller, f"/api/v1/gpus/{uuid}")
        new = api(controller, f"/api/v1/gpus/{other_uuid}")
        (old_place,) = old["placements"]
        new_machines = {p["machine_id"] for p in new["placements"]}
        assert old_place["node"] == node and old_place["to_at"] is not None
        assert old_place["machine_id"].startswith("gce:")
        assert new_machines and old_place["machine_id"] not in new_machines
        assert all(m.startswith("gce:") for m in new_machines)
        assert old["faults_by_xid"] == {"79": 1} and new["faults_by_xid"] == {"79": 1}
        assert not new["conflicts"]
    finally:
        controller.stop()

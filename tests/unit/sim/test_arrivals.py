"""Hardware faults and machines that arrive broken, through the inject API on a real SimCluster
driven tick by tick on a fake clock: `nvlink_slow` and `versions` change what the programs report
and survive a reboot, `doa_next` breaks a pool's next new machine (a replacement through the
node-pool API here; the other clouds in tests/integration/test_sim_hardware.py), `--doa-rate`
breaks a fraction of them, and bad requests are refused with the reason."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from starlette.testclient import TestClient

from remediator.cli import build_parser
from remediator.clock import FakeClock
from remediator.sim.kube.controllers.cluster import SimCluster
from remediator.sim.node.gfd import DRIVER_FULL, version_labels
from remediator.sim.node.hardware import CUDA_VERSION, DRIVER_VERSION
from remediator.sim.services import CloudApps, build_cloud_apps

POOL = "h100-train"


class Sim:
    def __init__(self, doa_rate: float = 0.0) -> None:
        self.clock = FakeClock()
        self.cluster = SimCluster(clock=self.clock)
        self.cluster.set_feature_labels(version_labels())
        for i in range(3):
            self.cluster.add_node(f"{POOL}-{i}", POOL, 8)
        self.apps: CloudApps = build_cloud_apps(
            self.cluster, provision_delay=1.0, clock=self.clock, doa_rate=doa_rate
        )
        self.inject = TestClient(self.apps.inject)
        self.nodepool = TestClient(self.apps.nodepool)

    def run_for(self, seconds: float) -> None:
        for _ in range(int(seconds / 0.5)):
            self.clock.advance(0.5)
            self.cluster.tick()

    def replace(self, node: str, key: str) -> str:
        answer = self.nodepool.post(
            f"/v1/pools/{POOL}/replacements",
            json={"node": node, "reason": "test"},
            headers={"Idempotency-Key": key},
        )
        assert answer.status_code == 202, answer.text
        op = answer.json()["id"]
        self.run_for(2.0)
        done = self.nodepool.get(f"/v1/operations/{op}").json()
        assert done["state"] == "succeeded", done
        return str(done["new_node"])

    def run(self, node: str, command: str) -> tuple[int, str]:
        """What a container running `command` on `node` does (the kubelet asks the same)."""
        pod = {"spec": {"containers": [{"name": "c", "command": ["sh", "-c", command]}]}}
        result = self.cluster._ctx.programs(pod, node)  # the runner build_cloud_apps installed
        assert result is not None
        return result.exit_code, result.output

    def faults(self, node: str) -> list[dict[str, Any]]:
        found = self.inject.get("/v1/faults").json()["faults"]
        return [f for f in found if f["node"] == node]


def smi_csv(sim: Sim, node: str, fields: str) -> list[dict[str, str]]:
    code, out = sim.run(node, f"nvidia-smi --query-gpu={fields} --format=csv")
    assert code == 0, out
    return list(csv.DictReader(io.StringIO(out), skipinitialspace=True))


def avg_busbw(sim: Sim, node: str) -> float:
    code, out = sim.run(node, "all_reduce_perf -b 1G -e 8G -f 2 -g 8")
    assert code == 0, out
    line = next(x for x in out.splitlines() if x.startswith("# Avg bus bandwidth"))
    return float(line.split(":")[1])


def test_a_slow_nvlink_lowers_all_reduce_and_survives_a_reboot_until_cleared() -> None:
    sim = Sim()
    node = f"{POOL}-0"
    healthy = avg_busbw(sim, node)
    answer = sim.inject.post(
        "/v1/faults", json={"type": "nvlink_slow", "node": node, "fraction": 0.5}
    )
    assert answer.status_code == 200, answer.text
    assert avg_busbw(sim, node) == pytest.approx(healthy * 0.5, rel=0.05)
    sim.apps.reboot(node)
    sim.run_for(6.0)
    assert avg_busbw(sim, node) == pytest.approx(healthy * 0.5, rel=0.05)
    assert {"node": node, "type": "nvlink_slow", "fraction": 0.5} in sim.faults(node)
    sim.inject.post("/v1/faults", json={"type": "clear", "node": node})
    assert avg_busbw(sim, node) == pytest.approx(healthy, rel=0.05)


def test_another_driver_shows_in_nvidia_smi_dcgm_and_the_exporter_labels() -> None:
    sim = Sim()
    node = f"{POOL}-1"
    body = {"type": "versions", "node": node, "driver_version": "535.183.01"}
    assert sim.inject.post("/v1/faults", json=body).status_code == 200
    rows = smi_csv(sim, node, "driver_version,vbios_version")
    assert {r["driver_version"] for r in rows} == {"535.183.01"}
    _, table = sim.run(node, "nvidia-smi")
    assert "CUDA Version: 12.2" in table
    metrics = TestClient(sim.apps.metrics).get("/metrics", params={"node": node}).text
    assert 'DCGM_FI_DRIVER_VERSION="535.183.01"' in metrics
    sim.inject.post("/v1/faults", json={"type": "clear", "node": node})
    _, table = sim.run(node, "nvidia-smi")
    assert f"CUDA Version: {CUDA_VERSION}" in table


def driver_label(sim: Sim, node: str) -> tuple[str | None, str | None]:
    found = sim.cluster.store.find("nodes", "", node)
    labels = (found or {}).get("metadata", {}).get("labels", {})
    return labels.get(DRIVER_FULL), labels.get("nvidia.com/cuda.runtime-version.full")


def test_gpu_feature_discovery_labels_follow_the_machines_driver() -> None:
    sim = Sim()
    node = f"{POOL}-1"
    assert driver_label(sim, node) == (DRIVER_VERSION, CUDA_VERSION)
    body = {"type": "versions", "node": node, "driver_version": "535.183.01"}
    assert sim.inject.post("/v1/faults", json=body).status_code == 200
    assert driver_label(sim, node) == ("535.183.01", "12.2")
    sim.inject.post("/v1/faults", json={"type": "clear", "node": node})
    assert driver_label(sim, node) == (DRIVER_VERSION, CUDA_VERSION)
    doa = {"type": "doa_next", "pool": POOL, "fault": {"type": "versions", **body}}
    doa["fault"].pop("node")
    assert sim.inject.post("/v1/nodepool-faults", json=doa).status_code == 200
    new = sim.replace(f"{POOL}-2", "gfd")
    assert driver_label(sim, new) == ("535.183.01", "12.2")


def test_a_missing_gpu_and_a_down_port_shorten_the_inventory() -> None:
    sim = Sim()
    node = f"{POOL}-2"
    sim.inject.post("/v1/faults", json={"type": "gpu_missing", "node": node, "gpu": 5})
    sim.inject.post("/v1/faults", json={"type": "ib_link_down", "node": node, "device": "mlx5_2"})
    assert len(smi_csv(sim, node, "index,uuid")) == 7
    code, out = sim.run(node, "all_reduce_perf -b 8 -e 8G -f 2 -g 8")
    assert code != 0 and "only 7 were found" in out
    _, ibstat = sim.run(node, "ibstat mlx5_2")
    assert "State: Down" in ibstat


def test_the_exporter_and_nvidia_smi_name_each_gpu_the_same() -> None:
    sim = Sim()
    node = f"{POOL}-0"
    uuids = [r["uuid"] for r in smi_csv(sim, node, "uuid")]
    metrics = TestClient(sim.apps.metrics).get("/metrics", params={"node": node}).text
    assert all(f'UUID="{u}"' in metrics for u in uuids)


def test_the_next_replacement_arrives_with_the_queued_fault_and_the_one_after_is_good() -> None:
    sim = Sim()
    rule = {"type": "doa_next", "pool": POOL, "fault": {"type": "xid", "gpu": 3, "code": 79}}
    answer = sim.inject.post("/v1/nodepool-faults", json=rule)
    assert answer.status_code == 200, answer.text
    assert answer.json()["faults"]["doa_next"] == {
        POOL: [{"type": "xid", "gpu": 3, "code": 79, "persistent": True}]
    }
    old = f"{POOL}-0"
    old_uuids = {r["uuid"] for r in smi_csv(sim, old, "uuid")}
    bad = sim.replace(old, "k1")
    assert {"node": bad, "gpu": 3, "type": "xid", "code": 79} in sim.faults(bad)
    new_uuids = {r["uuid"] for r in smi_csv(sim, bad, "uuid")}
    assert len(new_uuids) == 7 and new_uuids.isdisjoint(old_uuids)  # a new machine, GPU 3 off
    code, report = sim.run(bad, "dcgmi diag -r 3 -j")
    assert code != 0 and "XID 79" in report
    sim.apps.reboot(bad)
    sim.run_for(6.0)
    assert {"node": bad, "gpu": 3, "type": "xid", "code": 79} in sim.faults(bad)  # hardware
    good = sim.replace(bad, "k2")
    assert sim.faults(good) == []
    assert sim.inject.get("/v1/nodepool-faults").json()["faults"]["doa_next"] == {}


def test_doa_next_takes_hardware_faults_of_every_kind() -> None:
    sim = Sim()
    faults = [
        {"type": "nvlink_slow", "fraction": 0.25},
        {"type": "ib_link_down", "device": "mlx5_7"},
        {"type": "versions", "vbios_version": "96.00.74.00.0D"},
        {"type": "gpu_missing", "gpu": 0},
    ]
    for fault in faults:
        rule = {"type": "doa_next", "pool": POOL, "fault": fault}
        assert sim.inject.post("/v1/nodepool-faults", json=rule).status_code == 200
    node = f"{POOL}-1"
    seen = []
    for i in range(len(faults)):
        node = sim.replace(node, f"key-{i}")
        seen.append({f["type"] for f in sim.faults(node)})
    assert seen == [{"nvlink_slow"}, {"ib_link_down"}, {"versions"}, {"gpu_missing"}]


@pytest.mark.parametrize(
    ("rule", "status", "says"),
    [
        (
            {"type": "doa_next", "pool": "nope", "fault": {"type": "xid", "gpu": 0, "code": 79}},
            404,
            "nope",
        ),
        ({"type": "doa_next", "pool": POOL, "fault": {"type": "clear"}}, 400, "clear"),
        (
            {
                "type": "doa_next",
                "pool": POOL,
                "fault": {"type": "xid", "node": "x", "gpu": 0, "code": 79},
            },
            400,
            "names no node",
        ),
        (
            {"type": "doa_next", "pool": POOL, "fault": {"type": "xid", "gpu": -1, "code": 79}},
            400,
            "gpu",
        ),
        ({"type": "doa_next", "pool": POOL, "fault": {"type": "warp"}}, 400, "fault"),
        (
            {"type": "doa_next", "pool": POOL, "fault": {"type": "nvlink_slow", "fraction": 2}},
            400,
            "fraction",
        ),
    ],
)
def test_bad_doa_rules_are_refused_with_the_reason(
    rule: dict[str, Any], status: int, says: str
) -> None:
    sim = Sim()
    answer = sim.inject.post("/v1/nodepool-faults", json=rule)
    assert answer.status_code == status, answer.text
    assert says in answer.json()["error"]["message"]
    assert sim.inject.get("/v1/nodepool-faults").json()["faults"]["doa_next"] == {}


def test_bad_hardware_faults_are_refused() -> None:
    sim = Sim()
    node = f"{POOL}-0"
    for body in (
        {"type": "versions", "node": node},
        {"type": "versions", "node": node, "driver_version": "latest"},
        {"type": "nvlink_slow", "node": node, "fraction": 0},
    ):
        answer = sim.inject.post("/v1/faults", json=body)
        assert answer.status_code == 400, answer.text
    assert sim.faults(node) == []


def test_a_doa_rate_of_one_breaks_every_new_machine_and_none_of_the_seeded() -> None:
    sim = Sim(doa_rate=1.0)
    assert all(sim.faults(f"{POOL}-{i}") == [] for i in range(3))
    node = f"{POOL}-0"
    for i in range(3):
        node = sim.replace(node, f"r{i}")
        assert sim.faults(node), f"replacement {i} arrived healthy"
    arrived = sim.inject.get("/v1/nodepool-faults").json()["faults"]["dead_on_arrival"]
    assert len(arrived) == 3 and all(a["pool"] == POOL for a in arrived)


def test_a_new_node_of_another_pool_is_not_touched() -> None:
    sim = Sim()
    rule = {"type": "doa_next", "pool": POOL, "fault": {"type": "nvlink_slow", "fraction": 0.5}}
    sim.inject.post("/v1/nodepool-faults", json=rule)
    sim.cluster.add_node("a100-0", "a100", 8)
    assert sim.faults("a100-0") == []


def test_the_doa_rate_flag_takes_a_fraction_for_sim_serve_and_the_demo() -> None:
    parser = build_parser()
    serve = parser.parse_args(
        ["sim", "serve", "--kubeconfig", "k", "--ready-file", "r", "--doa-rate", "0.2"]
    )
    assert serve.doa_rate == 0.2
    demo = parser.parse_args(["demo", "--doa-rate", "0.05"])
    assert demo.doa_rate == 0.05
    for bad in ("1.5", "-0.1", "lots"):
        with pytest.raises(SystemExit):
            parser.parse_args(["demo", "--doa-rate", bad])
    with pytest.raises(ValueError, match="between 0 and 1"):
        build_cloud_apps(SimCluster(clock=FakeClock()), clock=FakeClock(), doa_rate=2.0)


def test_the_hardware_endpoint_shows_each_machine_as_its_programs_report_it() -> None:
    sim = Sim()
    node = f"{POOL}-0"
    sim.inject.post("/v1/faults", json={"type": "gpu_missing", "node": node, "gpu": 6})
    (machine,) = sim.inject.get("/v1/hardware", params={"node": node}).json()["machines"]
    present = [g for g in machine["gpus"] if g["present"]]
    assert [g["uuid"] for g in present] == [r["uuid"] for r in smi_csv(sim, node, "uuid")]
    assert machine["driver_version"] == "550.127.08" and len(machine["ib_ports"]) == 8
    everyone = sim.inject.get("/v1/hardware").json()["machines"]
    assert [m["node"] for m in everyone] == [f"{POOL}-{i}" for i in range(3)]
    missing = sim.inject.get("/v1/hardware", params={"node": "nope"})
    assert missing.status_code == 404

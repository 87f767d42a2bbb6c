"""Done-when of #26 through the real CLI (`remediator run` as a subprocess) on each cloud the
simulator serves: a persistent XID 79 whose first replacement arrives dead (`doa_next`) ends
`succeeded` on the second replacement — two replacement operations, the failed validation and
its evidence on the timeline, the bad machine never schedulable — and the DOA figure shows in
the console and the metrics."""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.kube.client import KubeClient, WatchStream
from remediator.kube.objects import Node
from tests.fixtures.sim import FAST_PROGRAMS, SimHandle
from tests.integration.engine_support import ControllerProcess, provider_setting
from tests.integration.test_engine_validate import H100, POOL, REPAIR, REPLACE, SETTINGS

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TOKEN = "operator-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
FINISHED = ("succeeded", "failed", "held", "cancelled")
STARTUP_TAINT = "remediator.io/unvalidated=true:NoSchedule"
TAINT_KEY = "remediator.io/unvalidated"


def config(workdir: Path, sim: SimHandle, database: Path, policy: str = REPLACE) -> Path:
    policies = workdir / "policies"
    policies.mkdir(parents=True, exist_ok=True)
    (policies / "p.yaml").write_text(policy)
    (policies / "settings.yaml").write_text(f"{SETTINGS}startup_taint: {STARTUP_TAINT}\n")
    values = {
        "kubeconfig": str(sim.controller_kubeconfig),
        "policies_dir": str(policies),
        "database_url": f"sqlite:///{database}",
        "provider": provider_setting(sim),
        "web": {"listen": "127.0.0.1:0", "operator_tokens": [TOKEN]},
        "leader_election": {"enabled": False},
        "poll_interval_seconds": 0.5,
        "advance_interval_seconds": 0.2,
    }
    path = workdir / "config.yaml"
    path.write_text(json.dumps(values))
    return path


class NodeVersions:
    """Every version of every Node the simulator's API served, as a watch from before the
    signal sees them (ADDED, each MODIFIED, DELETED): a sampler could miss a moment between two
    polls, a watch cannot. A watch that broke off (410) is recorded, and fails the test."""

    def __init__(self, kube: KubeClient) -> None:
        self.versions: list[tuple[str, Node]] = []
        self.broken: list[str] = []
        self._kube = kube
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        _, self._version = kube.list_nodes_versioned()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._stream = self._kube.watch_nodes(self._version, timeout_seconds=60)
                for event in self._stream.events():
                    obj = event.get("object") or {}
                    self._version = str((obj.get("metadata") or {}).get("resourceVersion"))
                    if event.get("type") != "BOOKMARK":
                        self.versions.append((str(event.get("type")), Node.from_json(obj)))
            except Exception as exc:  # the reason goes to the assertion
                if not self._stop.is_set():
                    self.broken.append(f"{type(exc).__name__}: {exc}")
                return

    def of(self, name: str, since: datetime, until: datetime) -> list[tuple[str, Node]]:
        """The versions of one machine (GCE recreates an instance under its old name: the
        creation time tells them apart)."""
        return [
            (kind, node)
            for kind, node in self.versions
            if node.name == name
            and node.created_at is not None
            and since <= node.created_at <= until
        ]

    def stop(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.close()
        self._thread.join(timeout=10)


def at(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(str(event["at"]).replace("Z", "+00:00"))


def finished(http: httpx.Client, node: str, timeout: float = 400.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = http.get("/api/v1/remediations", params={"node": node}).json()["items"]
        if items and items[0]["state"] in FINISHED:
            detail: dict[str, Any] = http.get(f"/api/v1/remediations/{items[0]['id']}").json()
            return detail
        time.sleep(0.3)
    raise AssertionError(f"{node}: not finished within {timeout:.0f}s")


@pytest.mark.parametrize("cloud", ["http", "aws", "clusterapi", "gce"])
def test_a_dead_on_arrival_replacement_ends_succeeded_on_the_second(
    cloud: str,
    sim_factory: Callable[..., SimHandle],
    sqlite_head_template: Path,
    tmp_path: Path,
) -> None:
    sim = sim_factory(nodes=4, provision_delay=1.0, cloud=cloud, startup_taint=STARTUP_TAINT)
    database = tmp_path / "remediator.db"
    shutil.copyfile(sqlite_head_template, database)
    controller = ControllerProcess(tmp_path, config(tmp_path, sim, database), "controller")
    kube = KubeClient.from_kubeconfig(sim.kubeconfig, timeout=10.0)
    watcher = NodeVersions(kube)
    http = httpx.Client(base_url="http://unset", headers=AUTH, timeout=30.0)
    try:
        controller.wait_ready(timeout=120)
        http.base_url = httpx.URL(controller.web_url)
        node = sorted(n.name for n in kube.list_nodes(f"simcloud.io/nodepool={POOL}"))[0]
        rule = {"type": "doa_next", "pool": POOL, "fault": {"type": "xid", "gpu": 2, "code": 79}}
        httpx.post(f"{sim.inject_url}/v1/nodepool-faults", json=rule, timeout=10).raise_for_status()
        fault = {"type": "xid", "node": node, "gpu": 0, "code": 79, "persistent": True}
        httpx.post(f"{sim.inject_url}/v1/faults", json=fault, timeout=10).raise_for_status()
        signal = {
            "node": node,
            "kind": "xid",
            "code": 79,
            "gpu": 0,
            "source": "test",
            "observed_at": datetime.now(UTC).isoformat(),
        }
        pushed = datetime.now(UTC)
        assert http.post("/api/v1/signals", json=[signal]).status_code == 202
        done = finished(http, node)
        watcher.stop()

        assert done["state"] == "succeeded", (done.get("hold_reason"), done.get("error"))
        events = done["events"]
        replaced = [e for e in events if e["action"] == "replace_done"]
        assert len(replaced) == 2
        assert len({e["detail"]["operation_id"] for e in replaced}) == 2
        bad, good = (e["detail"]["new_node"] for e in replaced)
        (failed,) = [e for e in events if e["action"] == "validate_failed"]
        assert failed["detail"]["node"] == bad and failed["to_state"] == "replacing"
        assert "GPU 2" in failed["detail"]["reason"]
        assert failed["detail"]["provider"] == cloud
        assert any(e["action"] == "validation_check" and not e["detail"]["passed"] for e in events)
        # The bad machine, from its registration to its deletion: every version the API served
        # carried the startup taint (it failed, so nothing removed it) and, once the validate
        # step fenced it, the cordon. (On GCE the good one, recreated under the same name, is
        # created after the failure.)
        assert not watcher.broken, watcher.broken
        served = watcher.of(bad, pushed - timedelta(seconds=1), at(failed))
        kinds = [kind for kind, _ in served]
        assert kinds[0] == "ADDED" and kinds[-1] == "DELETED", kinds
        unfenced = [
            (kind, version.resource_version)
            for kind, version in served
            if not any(t.key == TAINT_KEY and t.effect == "NoSchedule" for t in version.taints)
        ]
        assert not unfenced, f"{bad} was served without the startup taint: {unfenced}"
        assert served[-1][1].unschedulable, "the failed machine left uncordoned"
        # The good machine: the startup taint went with its passed validation.
        assert not any(t.key == TAINT_KEY for t in kube.get_node(good).taints)
        assert done["new_node"] == good

        page = http.get("/validations").text
        assert "1 of 2 new machines (50.0%)" in page and H100 in page
        metrics = httpx.get(f"{controller.web_url}/metrics", timeout=30).text
        wanted = {
            f'pool="{POOL}"',
            f'gpu_model="{H100}"',
            f'provider="{cloud}"',
            'new_machine="true"',
        }
        counted = {
            line.rsplit(" ", 1)[0].split("{", 1)[1].rstrip("}"): float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("remediator_validations_total{")
        }
        by_result = {
            labels.rsplit('result="', 1)[1].rstrip('"'): value
            for labels, value in counted.items()
            if wanted <= set(labels.split(","))
        }
        assert by_result == {"failed": 1.0, "passed": 1.0}, counted
    finally:
        watcher.stop()
        http.close()
        controller.stop()


@pytest.mark.parametrize("cloud", ["http", "aws", "clusterapi", "gce"])
def test_a_slow_nvlink_repair_fails_validation_and_goes_on_to_replacement(
    cloud: str,
    sim_factory: Callable[..., SimHandle],
    sqlite_head_template: Path,
    tmp_path: Path,
) -> None:
    """The repair half of the done-when, on each cloud: an XID 74 is repaired in place (the
    provider's reboot), the node's NVLink stays at half its bandwidth, its validation fails on
    the all-reduce's bus bandwidth, and the remediation goes on to its ladder's `on_failure:
    replace`; the new machine validates and the remediation ends succeeded. The repaired
    machine, cordoned first, is never uncordoned (on GCE the new machine is the same instance
    name recreated: the creation time tells the two apart)."""
    sim = sim_factory(
        nodes=4,
        provision_delay=1.0,
        reboot_delay=1.0,
        cloud=cloud,
        program_time_scale=FAST_PROGRAMS,
        startup_taint=STARTUP_TAINT,
    )
    database = tmp_path / "remediator.db"
    shutil.copyfile(sqlite_head_template, database)
    controller = ControllerProcess(tmp_path, config(tmp_path, sim, database, REPAIR), "controller")
    kube = KubeClient.from_kubeconfig(sim.kubeconfig, timeout=10.0)
    watcher = NodeVersions(kube)
    http = httpx.Client(base_url="http://unset", headers=AUTH, timeout=30.0)
    try:
        controller.wait_ready(timeout=180)
        http.base_url = httpx.URL(controller.web_url)
        node = sorted(n.name for n in kube.list_nodes(f"simcloud.io/nodepool={POOL}"))[0]
        fault = {"type": "nvlink_slow", "node": node, "fraction": 0.5}
        httpx.post(f"{sim.inject_url}/v1/faults", json=fault, timeout=10).raise_for_status()
        signal = {
            "node": node,
            "kind": "xid",
            "code": 74,
            "gpu": 0,
            "source": "test",
            "observed_at": datetime.now(UTC).isoformat(),
        }
        pushed = datetime.now(UTC)
        assert http.post("/api/v1/signals", json=[signal]).status_code == 202
        done = finished(http, node, timeout=240)
        watcher.stop()

        assert done["state"] == "succeeded", (done.get("hold_reason"), done.get("error"))
        events = done["events"]
        actions = [e["action"] for e in events]
        assert "reboot_requested" in actions and "reboot_accepted" in actions, actions
        (failed,) = [e for e in events if e["action"] == "validate_failed"]
        assert failed["detail"]["node"] == node and failed["detail"]["new_machine"] is False
        assert failed["detail"]["provider"] == cloud
        assert failed["to_state"] == "replacing" and failed["detail"]["escalated_to"] == "replace"
        assert "under the" in failed["detail"]["reason"] and H100 in failed["detail"]["reason"]
        # The evidence: the nccl check's measured bus bandwidth and the floor it missed (the
        # repaired machine's, judged before the failure; on GCE the new machine has its name).
        (nccl,) = [
            e["detail"]
            for e in events
            if e["action"] == "validation_check"
            and e["detail"]["node"] == node
            and e["detail"]["check"] == "nccl"
            and at(e) <= at(failed)
        ]
        assert nccl["passed"] is False and nccl["floor_gbps"] == 400.0, nccl
        assert 0 < nccl["busbw_gbps"] < nccl["floor_gbps"], nccl
        (replaced,) = [e for e in events if e["action"] == "replace_done"]
        good = replaced["detail"]["new_node"]
        assert done["new_node"] == good and (good != node or cloud == "gce")
        (passed,) = [e for e in events if e["action"] == "validate_done"]
        assert passed["detail"]["node"] == good and passed["detail"]["new_machine"] is True
        moves = [e["to_state"] for e in events if e["to_state"] is not None]
        assert moves[-4:] == ["replacing", "validating", "verifying", "succeeded"], moves
        assert not any(a.startswith("uncordon") for a in actions), actions

        # The repaired node, in every version the API served from before the signal to its
        # deletion: the first change was the cordon, and neither the reboot nor the failed
        # validation let it back.
        assert not watcher.broken, watcher.broken
        served = [
            (kind, version)
            for kind, version in watcher.versions
            if version.name == node
            and version.created_at is not None
            and version.created_at < pushed
        ]
        assert served and served[-1][0] == "DELETED", [kind for kind, _ in served]
        uncordoned = [
            (kind, version.resource_version)
            for kind, version in served
            if not version.unschedulable
        ]
        assert not uncordoned, f"{node} was served schedulable: {uncordoned}"
        assert not any(t.key == TAINT_KEY for t in kube.get_node(good).taints)

        # The console's latest validations: the repaired node's failure, then the new machine.
        page = http.get("/validations").text
        rows = [
            row
            for row in re.findall(r"<tr>(.*?)</tr>", page, re.S)
            if f'href="/nodes/{node}"' in row or f'href="/nodes/{good}"' in row
        ]
        repaired = [row for row in rows if "<td>repaired</td>" in row]
        new = [row for row in rows if "<td>new machine</td>" in row]
        assert len(repaired) == 1 and len(new) == 1, rows
        assert f'href="/nodes/{node}"' in repaired[0], rows
        assert f'/remediations/{done["id"]}">failed: all_reduce_perf' in repaired[0], rows
        assert f'href="/nodes/{good}"' in new[0] and ">passed</a>" in new[0], rows
    finally:
        watcher.stop()
        http.close()
        controller.stop()

"""Repair before replace, end to end: the real `remediator run`, the real simulator, faults
injected with the real `remediator sim inject` CLI and XIDs pushed to the controller's signal
API as the node agent would.

- a transient XID 79 → drain → reboot → diagnose passes → uncordon: succeeded (repaired), same
  node, no replacement;
- a persistent XID 79 → reboot → diagnose fails → replace: succeeded (replaced);
- a transient XID 95 on GPU 3 → drain → reset GPU 3 only → diagnose → uncordon;
- the third reboot of one node within the window goes straight to replace;
- a GPU reset that fails goes on with the named fallback ladder (`on_failure: xid-79-reboot`):
  reboot → diagnose → uncordon, repaired;
- SIGKILL during the reboot wait: the restarted controller waits for that reboot, one reboot;
- on Compute Engine and AWS (`sim serve --cloud gce|aws`), the reboot is the provider's own call
  (`instances.reset`, EC2 `RebootInstances`), named on the timeline.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

from remediator.model.states import State
from remediator.store.records import RemediationRecord
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import PROCESS_SETTINGS, ProcessRun

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(600)]

POOL = "h100-train"
OPERATOR = {"Authorization": "Bearer operator-token"}
POLICIES = """
policies:
  - name: xid-79-reboot
    description: GPU fallen off the bus; reboot, check, return the node, replace if that fails.
    why: NVIDIA XID catalog, XID 79 - reboot the node; replace (RMA) when it does not recover.
    match: {kind: xid, codes: [79]}
    priority: 100
    cooldown: 1s
    on_failure: replace
    actions:
      - action: cordon
      - action: drain
        grace: 1s
        timeout: 1m
        on_timeout: force
      - action: reboot
        timeout: 2m
        max_reboots: 2
        window: 1h
      - action: diagnose
        level: 1
        timeout: 2m
      - action: uncordon
  - name: xid-95-reset
    description: Uncontained ECC error; reset the GPU, check, return the node.
    why: NVIDIA XID catalog, XID 95 - reset the GPU; reboot when the reset fails, then replace.
    match: {kind: xid, codes: [95]}
    priority: 100
    cooldown: 1s
    on_failure: xid-79-reboot
    actions:
      - action: cordon
      - action: drain
        grace: 1s
        timeout: 1m
        on_timeout: force
      - action: reset_gpu
        timeout: 2m
      - action: diagnose
        level: 1
        timeout: 2m
      - action: uncordon
"""


class Flow(ProcessRun):
    def __init__(self, sim: SimHandle, tmp_path: Path, database_url: str) -> None:
        super().__init__(
            sim,
            tmp_path,
            database_url,
            policies={"gpu.yaml": POLICIES, "settings.yaml": PROCESS_SETTINGS},
            config={"repair": {"poll_seconds": 0.3}},
        )

    def inject(self, node: str, *args: str) -> None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "remediator",
                "sim",
                "inject",
                "--url",
                self.sim.inject_url,
                "--node",
                node,
                *args,
            ],
            check=True,
            capture_output=True,
            timeout=180,  # a CLI start: over 30 s at load 16
        )

    def wait_nth(
        self, node: str, count: int, *states: State, timeout: float = 120.0
    ) -> RemediationRecord:
        """The node's `count`-th remediation once it is in one of `states`."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.records(node)
            if len(found) >= count and found[count - 1].state in states:
                return found[count - 1]
            if time.monotonic() > deadline:
                last = [(e.action, dict(e.detail)) for e in found[-1].events[-4:]] if found else []
                raise AssertionError(
                    f"{node}: {[(r.state, r.error) for r in found]}\nlast events: {last}\n"
                    f"{self.controller.log_tail()}"
                )
            time.sleep(0.2)

    def wait_event(self, node: str, action: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.action == action for r in self.records(node) for e in r.events):
            assert time.monotonic() < deadline, f"no {action} on {node}"
            time.sleep(0.05)

    def reboots_seen(self, node: str) -> int:
        events = json.loads(self.sim.kubectl("get", "events", "-A", "-o", "json"))["items"]
        return sum(
            1
            for e in events
            if e.get("reason") == "Rebooted" and e["involvedObject"].get("name") == node
        )

    def spare(self) -> int:
        got = httpx.get(f"{self.sim.nodepool_url}/v1/pools/{POOL}/capacity", timeout=5).json()
        return int(got["spare_capacity"])


@pytest.fixture
def flow(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Flow]:
    sim = sim_factory(nodes=12, provision_delay=0.5, reboot_delay=2.0)
    running = Flow(sim, tmp_path, migrated_database_url)
    yield running
    running.controller.stop()


def train(flow: Flow, index: int) -> str:
    names = flow.sim.kubectl("get", "nodes", "-l", f"simcloud.io/nodepool={POOL}", "-o", "name")
    return names.split()[index].removeprefix("node/")


def actions(record: RemediationRecord) -> list[str]:
    return [e.action for e in record.events]


def back_in_service(flow: Flow, name: str) -> bool:
    node = flow.node(name)
    assert node is not None, f"{name} is gone"
    taints = [t["key"] for t in node["spec"].get("taints") or []]
    return not node["spec"].get("unschedulable") and "remediator.io/quarantine" not in taints


def test_transient_xid_79_is_repaired_by_a_reboot(flow: Flow) -> None:
    node = train(flow, 0)
    spare = flow.spare()
    flow.inject(node, "--gpu", "0", "--xid", "79")
    flow.push_xid(node, 79, gpu=0)
    done = flow.wait_nth(node, 1, State.SUCCEEDED, State.FAILED, State.HELD)
    assert done.state is State.SUCCEEDED, (done.error, actions(done))
    assert done.outcome == "repaired" and done.new_node is None
    steps = actions(done)
    assert steps.count("reboot_requested") == 1
    for step in ("drain_done", "reboot_done", "diagnose_done", "uncordon_done"):
        assert step in steps
    diag = next(e for e in done.events if e.action == "diagnose_done")
    assert {t["status"] for t in diag.detail["tests"]} == {"Pass"}
    assert back_in_service(flow, node)
    assert flow.spare() == spare
    assert flow.reboots_seen(node) == 1


def test_persistent_xid_79_fails_diagnostics_and_is_replaced(flow: Flow) -> None:
    node = train(flow, 1)
    flow.inject(node, "--gpu", "2", "--xid", "79", "--persistent")
    flow.push_xid(node, 79, gpu=2)
    done = flow.wait_nth(node, 1, State.SUCCEEDED, State.FAILED, State.HELD)
    assert done.state is State.SUCCEEDED, (done.error, actions(done))
    assert done.outcome == "replaced" and done.new_node
    failed = next(e for e in done.events if e.action == "diagnose_failed")
    assert failed.detail["escalated_to"] == "replace"
    assert any(t["status"] == "Fail" and t.get("gpu") == "2" for t in failed.detail["tests"])
    assert flow.node(node) is None


def test_transient_xid_95_resets_only_its_gpu(flow: Flow) -> None:
    node = train(flow, 2)
    flow.inject(node, "--gpu", "3", "--xid", "95")
    flow.push_xid(node, 95, gpu=3)
    done = flow.wait_nth(node, 1, State.SUCCEEDED, State.FAILED, State.HELD)
    assert done.state is State.SUCCEEDED, (done.error, actions(done))
    assert done.outcome == "repaired"
    assert "reboot_requested" not in actions(done)
    reset = next(e for e in done.events if e.action == "reset_gpu_done")
    assert reset.detail["gpus"] == [3]
    jobs = json.loads(
        flow.sim.kubectl(
            "get", "jobs", "-n", "remediator", "-l", "remediator.io/step=reset_gpu", "-o", "json"
        )
    )["items"]
    assert [j["metadata"]["name"] for j in jobs] == [f"remediator-reset-gpu-{done.id}-0-gpu3"]
    assert flow.reboots_seen(node) == 0
    assert back_in_service(flow, node)


def test_a_failed_gpu_reset_goes_on_with_the_named_reboot_ladder(flow: Flow) -> None:
    node = train(flow, 7)
    # The driver lost GPU 3: `nvidia-smi --gpu-reset` cannot find it, a reboot brings it back.
    flow.inject(node, "--gpu", "3", "--gpu-missing")
    flow.push_xid(node, 95, gpu=3)
    done = flow.wait_nth(node, 1, State.SUCCEEDED, State.FAILED, State.HELD)
    assert done.state is State.SUCCEEDED, (done.error, actions(done))
    assert done.outcome == "repaired" and done.new_node is None
    failed = next(e for e in done.events if e.action == "reset_gpu_failed")
    assert failed.detail["escalated_to"] == "xid-79-reboot"
    assert failed.detail["ladder"] == ["reboot", "diagnose", "uncordon"]
    steps = actions(done)
    after = steps[steps.index("reset_gpu_failed") :]
    for step in ("reboot_requested", "reboot_done", "diagnose_done", "uncordon_done"):
        assert step in after
    assert [step["action"] for step in done.ladder] == ["reboot", "diagnose", "uncordon", "replace"]
    assert flow.reboots_seen(node) == 1
    assert back_in_service(flow, node)


def test_the_third_reboot_within_the_window_goes_straight_to_replace(flow: Flow) -> None:
    node = train(flow, 3)
    # A different GPU each time: the signal dedup folds one (node, GPU, code) for its window.
    for nth, gpu in ((1, 0), (2, 1)):
        flow.inject(node, "--gpu", str(gpu), "--xid", "79")
        flow.push_xid(node, 79, gpu=gpu)
        repaired = flow.wait_nth(node, nth, State.SUCCEEDED, State.FAILED, State.HELD)
        assert repaired.outcome == "repaired", (repaired.error, actions(repaired))
        time.sleep(1.5)  # the policy's 1 s cooldown
    flow.inject(node, "--gpu", "2", "--xid", "79")
    flow.push_xid(node, 79, gpu=2)
    third = flow.wait_nth(node, 3, State.SUCCEEDED, State.FAILED, State.HELD)
    assert third.outcome == "replaced", (third.error, actions(third))
    assert "reboot_requested" not in actions(third)
    capped = next(e for e in third.events if e.action == "reboot_failed")
    assert capped.detail["reboots"] == 2 and capped.detail["escalated_to"] == "replace"
    assert flow.reboots_seen(node) == 2


def test_sigkill_during_the_reboot_wait_reboots_once(flow: Flow) -> None:
    node = train(flow, 4)
    flow.inject(node, "--gpu", "1", "--xid", "79")
    flow.push_xid(node, 79, gpu=1)
    flow.wait_event(node, "reboot_accepted")
    flow.controller.kill()
    flow.controller = flow.start()
    done = flow.wait_nth(node, 1, State.SUCCEEDED, State.FAILED, State.HELD)
    assert done.outcome == "repaired", (done.error, actions(done))
    assert actions(done).count("reboot_requested") == 1
    assert actions(done).count("reboot_accepted") == 1
    assert flow.reboots_seen(node) == 1


def test_sigkill_during_the_reboot_wait_of_a_persistent_fault_still_replaces_once(
    flow: Flow,
) -> None:
    node = train(flow, 5)
    spare = flow.spare()
    flow.inject(node, "--gpu", "6", "--xid", "79", "--persistent")
    flow.push_xid(node, 79, gpu=6)
    flow.wait_event(node, "reboot_accepted")
    flow.controller.kill()
    flow.controller = flow.start()
    done = flow.wait_nth(node, 1, State.SUCCEEDED, State.FAILED, State.HELD)
    assert done.outcome == "replaced", (done.error, actions(done))
    assert actions(done).count("reboot_requested") == 1
    assert flow.spare() == spare - 1


def test_sigkill_during_the_gpu_reset_resumes_without_a_second_reset(flow: Flow) -> None:
    node = train(flow, 6)
    flow.inject(node, "--gpu", "3", "--xid", "95")
    flow.push_xid(node, 95, gpu=3)
    deadline = time.monotonic() + 60
    while not any(r.state is State.RESETTING_GPU for r in flow.records(node)):
        assert time.monotonic() < deadline, "never reached resetting_gpu"
        time.sleep(0.05)
    flow.controller.kill()
    flow.controller = flow.start()
    done = flow.wait_nth(node, 1, State.SUCCEEDED, State.FAILED, State.HELD)
    assert done.outcome == "repaired", (done.error, actions(done))
    jobs = json.loads(
        flow.sim.kubectl(
            "get", "jobs", "-n", "remediator", "-l", "remediator.io/step=reset_gpu", "-o", "json"
        )
    )["items"]
    assert [j["metadata"]["name"] for j in jobs] == [f"remediator-reset-gpu-{done.id}-0-gpu3"]


@pytest.fixture(params=["gce", "aws"])
def cloud_flow(
    request: pytest.FixtureRequest,
    sim_factory: Callable[..., SimHandle],
    migrated_database_url: str,
    tmp_path: Path,
) -> Iterator[Flow]:
    sim = sim_factory(nodes=6, provision_delay=0.5, reboot_delay=2.0, cloud=request.param)
    running = Flow(sim, tmp_path, migrated_database_url)
    yield running
    running.controller.stop()


def reboot_calls(flow: Flow, node: str, detail: dict[str, Any]) -> list[str]:
    """The cloud's own record of the reboots of `node`: GCE's reset operations, or the EC2
    instance's reboot key (the call itself leaves no trace in EC2's API)."""
    if flow.sim.provider["type"] == "gce":
        operations = httpx.get(
            f"{flow.sim.gce_url}/compute/v1/projects/sim-project/zones/sim-central1-a/operations",
            timeout=5,
        ).json()["items"]
        resets = [
            op
            for op in operations
            if op["operationType"] == "reset" and op["targetLink"].endswith(f"/instances/{node}")
        ]
        assert all(op["status"] == "DONE" for op in resets)
        return [op["name"] for op in resets]
    keys = flow.sim.provider["test_credentials"]
    ec2 = boto3.client(
        "ec2",
        endpoint_url=flow.sim.provider["endpoint_url"],
        region_name=flow.sim.provider["region"],
        aws_access_key_id=keys["access_key_id"],
        aws_secret_access_key=keys["secret_access_key"],
    )
    found = ec2.describe_instances(InstanceIds=[detail["instance"]])["Reservations"]
    tags = {t["Key"]: t["Value"] for t in found[0]["Instances"][0].get("Tags") or ()}
    return [tags["remediator.io/reboot-key"]] if "remediator.io/reboot-key" in tags else []


def test_transient_xid_79_on_a_cloud_is_repaired_by_the_providers_reboot(
    cloud_flow: Flow,
) -> None:
    flow = cloud_flow
    node = train(flow, 0)
    flow.inject(node, "--gpu", "0", "--xid", "79")
    flow.push_xid(node, 79, gpu=0)
    done = flow.wait_nth(node, 1, State.SUCCEEDED, State.FAILED, State.HELD)
    assert done.state is State.SUCCEEDED, (done.error, actions(done))
    assert done.outcome == "repaired" and done.new_node is None
    steps = actions(done)
    assert steps.count("reboot_requested") == 1 and steps.count("reboot_accepted") == 1
    for step in ("reboot_done", "diagnose_done", "uncordon_done"):
        assert step in steps
    accepted = next(e for e in done.events if e.action == "reboot_accepted")
    detail = dict(accepted.detail)
    assert detail["via"] == "provider"
    if flow.sim.provider["type"] == "gce":
        assert detail["call"] == "compute.instances.reset" and detail["instance"] == node
        assert detail["reboot_id"] == detail["operation"]
        shown = [detail["call"], detail["operation"]]
        assert reboot_calls(flow, node, detail) == [detail["operation"]]
    else:
        provider_id = (flow.node(node) or {})["spec"]["providerID"]
        assert detail["call"] == "ec2:RebootInstances"
        assert detail["instance"] == provider_id.rsplit("/", 1)[-1] == detail["reboot_id"]
        shown = [detail["call"], detail["instance"]]
        assert reboot_calls(flow, node, detail) == [f"{done.idempotency_key}-reboot-0"]
    jobs = flow.sim.kubectl(
        "get", "jobs", "-n", "remediator", "-l", "remediator.io/step=reboot", "-o", "json"
    )
    assert not json.loads(jobs)["items"]
    assert back_in_service(flow, node)
    assert flow.reboots_seen(node) == 1
    # The console's timeline names the provider's reboot.
    page = httpx.get(
        f"{flow.controller.web_url}/remediations/{done.id}", headers=OPERATOR, timeout=10
    )
    assert page.status_code == 200, page.text[:300]
    for text in (*shown, "repaired"):
        assert text in page.text, text

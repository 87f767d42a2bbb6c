"""Each action against the real simulator, checked through stock kubectl.

The 4-node fleet: h100-train-0000/0001 run a 2-node training gang (speaks the checkpoint
handshake and answers after 5 s), h100-train-0002 runs an evaluation pod that opts out of
automatic replacement and does not speak it, a100-infer-0000 runs three replicas of an
inference Deployment (pinned to its pool, so the drain tests remove it first: its budget could
never be met on one node).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import yaml

from remediator.actions.checkpoint import (
    ANN_DEADLINE,
    ANN_DONE,
    ANN_HANDSHAKE,
    ANN_REQUESTED,
    give_notice,
)
from remediator.actions.drain import Drainer, OnTimeout, drain_until_done
from remediator.actions.optout import check_opt_out
from remediator.actions.outcome import Done, Held, Outcome, Waiting
from remediator.actions.pods import workloads
from remediator.actions.quarantine import QUARANTINE_TAINT, Why, quarantine
from remediator.actions.release import release
from remediator.clock import utcnow
from remediator.kube.client import KubeClient
from remediator.kube.objects import Pod
from remediator.model.disruption import disrupted_gpu_hours, evictions, rescheduled
from tests.fixtures.sim import SimHandle
from tests.integration.actions_support import until_settled, wait_for

pytestmark = pytest.mark.integration

TRAIN, OPT_OUT_NODE, SPARE = "h100-train-0000", "h100-train-0002", "a100-infer-0000"
OTHERS = ("h100-train-0000", "h100-train-0001", "h100-train-0002")
WHY = Why("rem-1", "xid-fatal", "XID 79 on GPU 3")


@pytest.fixture
def kube(sim: SimHandle) -> Iterator[KubeClient]:
    with KubeClient.from_kubeconfig(sim.kubeconfig) as client:
        yield client


def get(sim: SimHandle, *args: str) -> Any:
    return json.loads(sim.kubectl("get", *args, "-o", "json"))


def events(sim: SimHandle, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    selector = f"involvedObject.name={name},reason={reason}"
    found: list[dict[str, Any]] = get(sim, "events", "-n", namespace, "--field-selector", selector)[
        "items"
    ]
    return found


def test_quarantine_and_release(sim: SimHandle, kube: KubeClient) -> None:
    dry = quarantine(kube, SPARE, WHY, dry_run=True)
    assert isinstance(dry, Done) and dry.detail.startswith("dry run: would annotate")
    untouched = get(sim, "node", SPARE)
    assert "unschedulable" not in untouched["spec"] and not events(
        sim, "default", SPARE, "RemediatorQuarantine"
    )

    with _PatchLog.from_kubeconfig(sim.kubeconfig) as logged:
        done = quarantine(logged, SPARE, WHY)
    assert isinstance(done, Done)
    # The cordon lands with its owner's annotations, one round trip after the node was read
    # (the pushed XID → cordoned path): a cordoned node always names who must release it.
    first = logged.patches[0]
    assert first["spec"] == {"unschedulable": True}
    assert first["metadata"]["annotations"]["remediator.io/remediation-id"] == "rem-1"
    node = get(sim, "node", SPARE)
    # The GPUs taken out of service, as the node reports them, for the GPU-hours lost.
    assert done.facts["gpus"] == int(node["status"]["capacity"]["nvidia.com/gpu"]) > 0
    assert node["spec"]["unschedulable"] is True
    assert {"key": "remediator.io/quarantine", "value": "true", "effect": "NoSchedule"} in node[
        "spec"
    ]["taints"]
    annotations = node["metadata"]["annotations"]
    assert annotations["remediator.io/remediation-id"] == "rem-1"
    assert annotations["remediator.io/policy"] == "xid-fatal"
    assert annotations["remediator.io/signal"] == "XID 79 on GPU 3"
    (event,) = events(sim, "default", SPARE, "RemediatorQuarantine")
    assert "XID 79 on GPU 3" in event["message"] and event["type"] == "Warning"

    again = quarantine(kube, SPARE, WHY)
    assert isinstance(again, Done) and "already quarantined" in again.detail
    assert len(events(sim, "default", SPARE, "RemediatorQuarantine")) == 1
    assert isinstance(quarantine(kube, SPARE, Why("rem-2", "p", "s")), Held)

    assert isinstance(release(kube, SPARE, "rem-1"), Done)
    node = get(sim, "node", SPARE)
    assert "unschedulable" not in node["spec"]
    assert all(t["key"] != QUARANTINE_TAINT.key for t in node["spec"].get("taints", []))
    assert not any(k.startswith("remediator.io/") for k in node["metadata"].get("annotations", {}))
    second = release(kube, SPARE, "rem-1")
    assert isinstance(second, Done) and "not quarantined" in second.detail


def test_release_keeps_a_humans_cordon(sim: SimHandle, kube: KubeClient) -> None:
    sim.kubectl("cordon", OPT_OUT_NODE)
    assert isinstance(quarantine(kube, OPT_OUT_NODE, WHY), Done)
    assert isinstance(release(kube, OPT_OUT_NODE, "rem-1"), Done)
    node = get(sim, "node", OPT_OUT_NODE)
    assert node["spec"]["unschedulable"] is True
    assert all(t["key"] != QUARANTINE_TAINT.key for t in node["spec"].get("taints", []))


def test_opt_out_holds_until_the_pod_goes(sim: SimHandle, kube: KubeClient) -> None:
    held = check_opt_out(kube, OPT_OUT_NODE)
    assert isinstance(held, Held) and held.facts["pods"] == ["eval/eval-longrun-0"]
    assert isinstance(check_opt_out(kube, TRAIN), Done)
    sim.kubectl("delete", "pod", "-n", "eval", "eval-longrun-0", "--wait=false")
    assert isinstance(check_opt_out(kube, OPT_OUT_NODE), Done)


def notice(kube: KubeClient, node: str, asked_at: datetime, now: datetime | None = None) -> Outcome:
    """One round of the grace step with a 30 s..60 s grace."""
    return give_notice(
        kube,
        Drainer(kube),
        node,
        started_at=asked_at,
        min_grace=30,
        max_grace=60,
        now=now or utcnow(),
    )


def test_grace_asks_the_handshake_workload_then_evicts_it_with_the_rest_of_its_clock(
    sim: SimHandle, kube: KubeClient
) -> None:
    asked_at = utcnow()
    first = notice(kube, TRAIN, asked_at)
    assert isinstance(first, Waiting) and len(first.facts["asked"]) == 1
    (pod_key,) = first.facts["asked"]
    namespace, name = pod_key.split("/")
    annotations = get(sim, "pod", "-n", namespace, name)["metadata"]["annotations"]
    stamp = annotations[ANN_REQUESTED]
    assert ANN_HANDSHAKE in annotations and ANN_DEADLINE in annotations
    assert isinstance(notice(kube, TRAIN, asked_at), Waiting)
    assert len(events(sim, namespace, name, "CheckpointRequested")) == 1  # asked once only

    done = until_settled(lambda: notice(kube, TRAIN, asked_at), timeout=120)
    assert isinstance(done, Done) and done.facts["answered"] == [pod_key]
    (row,) = done.facts["pods"]
    assert row["state"] == "evicted" and 1 <= row["grace_seconds"] < 60
    pod = get(sim, "pod", "-n", namespace, name)
    assert pod["metadata"]["annotations"][ANN_REQUESTED] == stamp
    assert ANN_DONE in pod["metadata"]["annotations"] and pod["metadata"].get("deletionTimestamp")


def test_a_workload_without_the_handshake_is_evicted_at_once_with_its_own_grace(
    sim: SimHandle, kube: KubeClient
) -> None:
    outcome = notice(kube, OPT_OUT_NODE, utcnow())
    assert isinstance(outcome, Done), outcome
    assert outcome.facts["asked"] == [] and outcome.facts["pending"] == []
    # Its own terminationGracePeriodSeconds is 120: held to the policy's max_grace of 60.
    assert outcome.facts["pods"] == [
        {
            "pod": "eval/eval-longrun-0",
            "state": "evicted",
            "sigterm_at": outcome.facts["pods"][0]["sigterm_at"],
            "grace_seconds": 60,
            # What the disrupted GPU-hours count: its GPUs, and no owner to replace it.
            "uid": outcome.facts["pods"][0]["uid"],
            "gpus": 4,
            "unmanaged": True,
        }
    ]
    assert events(sim, "eval", "eval-longrun-0", "CheckpointRequested") == []


class _WorkloadEndsAfterList(KubeClient):
    """A real client; right after listing a node's pods, the first workload there ends (a job
    finishing between the grace step's list and its patch)."""

    def list_pods_on_node(self, node: str) -> list[Pod]:
        pods = super().list_pods_on_node(node)
        ending = workloads(pods)[0]
        self.delete_pod(ending.namespace, ending.name, 0)
        return pods


def test_grace_skips_a_workload_that_ended_meanwhile(sim: SimHandle) -> None:
    with _WorkloadEndsAfterList.from_kubeconfig(sim.kubeconfig) as racing:
        outcome = notice(racing, TRAIN, utcnow())
    assert isinstance(outcome, Done), outcome
    assert outcome.facts["asked"] == [] and outcome.facts["pending"] == []


def test_a_handshake_that_never_comes_ends_with_the_clock_and_no_second_grace(
    kube: KubeClient,
) -> None:
    asked_at = utcnow()
    waiting = notice(kube, TRAIN, asked_at, now=asked_at)
    assert isinstance(waiting, Waiting) and waiting.retry_after <= 60
    late = notice(kube, TRAIN, asked_at, now=asked_at + timedelta(seconds=61))
    assert isinstance(late, Done) and "did not checkpoint within their grace" in late.detail
    assert [row["grace_seconds"] for row in late.facts["pods"]] == [1]


WORKLOAD = """
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations: {sim.remediator.io/shutdown-seconds: "1"}
    spec:
      terminationGracePeriodSeconds: 30
      tolerations:
      - {key: simcloud.io/dedicated, operator: Exists}
      - {key: nvidia.com/gpu, operator: Exists}
      containers: [{name: web, image: nginx}]
      volumes: [{name: cache, emptyDir: {}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web-pdb, namespace: shop}
spec:
  minAvailable: MIN_AVAILABLE
  selector: {matchLabels: {app: web}}
"""


def quick_sleep(seconds: float) -> None:
    time.sleep(min(seconds, 0.5))


def place_web_pods(sim: SimHandle, kube: KubeClient, min_available: int) -> None:
    """Both replicas on SPARE: fence the other nodes while they schedule, then open them again."""
    sim.kubectl(
        "delete", "deployments,replicasets,poddisruptionbudgets", "--all", "-n", "inference"
    )
    wait_for(lambda: not kube.list_pods("inference"), 30, "inference pods gone")
    for other in OTHERS:
        sim.kubectl("cordon", other)
    manifest = sim.workdir / "web.yaml"
    manifest.write_text(WORKLOAD.replace("MIN_AVAILABLE", str(min_available)))
    sim.kubectl("create", "--validate=false", "-f", str(manifest))
    wait_for(
        lambda: sum(p.phase == "Running" for p in kube.list_pods("shop")) == 2,
        30,
        "two running web pods",
    )
    assert {p.node_name for p in kube.list_pods("shop")} == {SPARE}
    for other in OTHERS:
        sim.kubectl("uncordon", other)


def test_drain_waits_for_the_budget_then_completes(sim: SimHandle, kube: KubeClient) -> None:
    place_web_pods(sim, kube, min_available=1)
    daemon_pods = {p.key for p in kube.list_pods_on_node(SPARE) if p.daemonset_owned}
    assert daemon_pods
    assert isinstance(quarantine(kube, SPARE, WHY), Done)
    rounds: list[Outcome] = []
    outcome = drain_until_done(
        Drainer(kube),
        SPARE,
        started_at=utcnow(),
        grace_seconds=30,
        timeout_seconds=60,
        on_round=rounds.append,
        sleep=quick_sleep,
    )
    assert isinstance(outcome, Done), outcome
    blocked = [
        pod
        for r in rounds
        for pod in r.facts["pods"]
        if pod["state"] == "blocked" and pod["reason"] == "blocked_by_pdb"
    ]
    assert blocked and "web-pdb" in blocked[0]["message"]
    evicted = {pod["pod"] for r in rounds for pod in r.facts["pods"] if pod["state"] == "evicted"}
    assert len(evicted) == 2 and all(key.startswith("shop/web-") for key in evicted)
    first = [p for p in rounds[0].facts["pods"] if p["pod"] in evicted]
    assert len(first) == 2 and all(p["empty_dir"] and "unmanaged" not in p for p in first)
    assert {s["pod"] for s in outcome.facts["skipped"]} == daemon_pods

    left = kube.list_pods_on_node(SPARE)
    assert {p.key for p in left} == daemon_pods
    web = kube.list_pods("shop")
    assert len(web) == 2 and all(p.node_name != SPARE and p.phase == "Running" for p in web)
    for key in evicted:
        namespace, name = key.split("/")
        (killing,) = [
            e for e in events(sim, namespace, name, "Killing") if "SIGTERM" in e["message"]
        ]
        assert "grace period 30s" in killing["message"]


def test_drain_timeout_hold_then_force(sim: SimHandle, kube: KubeClient) -> None:
    place_web_pods(sim, kube, min_available=2)  # the budget never allows an eviction
    assert isinstance(quarantine(kube, SPARE, WHY), Done)
    drainer = Drainer(kube)
    started = utcnow() - timedelta(seconds=120)  # the drain began two minutes ago
    held = drainer.drain(SPARE, started_at=started, grace_seconds=5, timeout_seconds=60)
    assert isinstance(held, Held) and "web-pdb" in held.reason
    assert {p["state"] for p in held.facts["pods"]} == {"blocked"}

    forced = drain_until_done(
        drainer,
        SPARE,
        started_at=started,
        grace_seconds=5,
        timeout_seconds=60,
        on_timeout=OnTimeout.FORCE,
        sleep=quick_sleep,
    )
    assert isinstance(forced, Done), forced
    assert not [p for p in kube.list_pods_on_node(SPARE) if not p.daemonset_owned]


WEB_PDB_LINE = (
    "disruption budget shop/web-pdb: 2 of 2 healthy, needs 2, 0 disruptions allowed "
    "(minAvailable 2)"
)


def test_a_blocked_drain_names_the_budget_and_its_numbers(sim: SimHandle, kube: KubeClient) -> None:
    place_web_pods(sim, kube, min_available=2)
    assert isinstance(quarantine(kube, SPARE, WHY), Done)
    drainer = Drainer(kube)
    waiting = drainer.drain(SPARE, started_at=utcnow(), grace_seconds=5, timeout_seconds=60)
    assert isinstance(waiting, Waiting), waiting
    assert waiting.reason.endswith(f"2 blocked; {WEB_PDB_LINE}")
    blocked = [p for p in waiting.facts["pods"] if p["state"] == "blocked"]
    assert len(blocked) == 2
    for entry in blocked:
        assert entry["message"] == WEB_PDB_LINE
        assert "disruption budget web-pdb" in entry["eviction_message"]
        assert entry["budgets"] == [
            {
                "name": "shop/web-pdb",
                "current_healthy": 2,
                "desired_healthy": 2,
                "expected_pods": 2,
                "disruptions_allowed": 0,
                "min_available": 2,
            }
        ]
    assert "pdb_lookup_error" not in waiting.facts

    held = drainer.drain(
        SPARE, started_at=utcnow() - timedelta(seconds=120), grace_seconds=5, timeout_seconds=60
    )
    assert isinstance(held, Held), held
    assert held.reason.count(WEB_PDB_LINE) == 2


class ForbidBudgets(ThreadingHTTPServer):
    """A loopback front for the simulator that answers the PDB list as an API server without
    the RBAC rule would (403), and passes every other request through, with the caller's
    token, over the simulator's TLS."""

    def __init__(self, sim: SimHandle) -> None:
        self.upstream = sim.kube_http()
        super().__init__(("127.0.0.1", 0), _ForbidHandler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _ForbidHandler(BaseHTTPRequestHandler):
    server: ForbidBudgets

    def _relay(self) -> None:
        if "/poddisruptionbudgets" in self.path:
            message = (
                'poddisruptionbudgets.policy is forbidden: User "system:serviceaccount:'
                'remediator:remediator" cannot list resource "poddisruptionbudgets" in API '
                'group "policy" in the namespace "shop"'
            )
            status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
            self._answer(403, json.dumps({**status, "message": message, "code": 403}).encode())
            return
        length = int(self.headers.get("Content-Length") or 0)
        relayed = ("content-type", "accept", "authorization")
        headers = {k: v for k, v in self.headers.items() if k.lower() in relayed}
        upstream = self.server.upstream.request(
            self.command,
            self.path,
            content=self.rfile.read(length) if length else None,
            headers=headers,
        )
        self._answer(upstream.status_code, upstream.content)

    def _answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _relay

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test's output is the assertions."""


def test_an_unreadable_budget_list_keeps_the_eviction_message(
    sim: SimHandle, kube: KubeClient
) -> None:
    place_web_pods(sim, kube, min_available=2)
    assert isinstance(quarantine(kube, SPARE, WHY), Done)
    front = ForbidBudgets(sim)
    thread = threading.Thread(target=front.serve_forever, daemon=True)
    thread.start()
    try:
        config = yaml.safe_load(sim.kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = front.url
        forbidden = sim.workdir / "kubeconfig-no-pdb"
        forbidden.write_text(yaml.safe_dump(config))
        with KubeClient.from_kubeconfig(forbidden) as client:
            drainer = Drainer(client)
            waiting = drainer.drain(SPARE, started_at=utcnow(), grace_seconds=5, timeout_seconds=60)
            assert isinstance(waiting, Waiting), waiting
            assert waiting.reason.endswith("2 blocked")
            assert "403" in waiting.facts["pdb_lookup_error"]
            for entry in waiting.facts["pods"]:
                assert entry["state"] == "blocked" and "budgets" not in entry
                assert "disruption budget web-pdb" in entry["message"]
            held = drainer.drain(
                SPARE,
                started_at=utcnow() - timedelta(seconds=120),
                grace_seconds=5,
                timeout_seconds=60,
            )
            assert isinstance(held, Held) and "disruption budget web-pdb" in held.reason
    finally:
        front.shutdown()
        front.server_close()
        front.upstream.close()


def test_drain_of_a_node_without_kubelet_holds_then_forces(
    sim: SimHandle, kube: KubeClient
) -> None:
    """Ready=Unknown: no kubelet ends the evicted pod, so it stays terminating for good."""
    fault = {"type": "condition", "node": OPT_OUT_NODE, "condition": "Ready", "status": "Unknown"}
    httpx.post(f"{sim.inject_url}/v1/faults", json=fault, timeout=5).raise_for_status()
    wait_for(lambda: not kube.get_node(OPT_OUT_NODE).ready, 60, "kubelet gone")
    drainer = Drainer(kube, poll_seconds=0.2)
    started = utcnow() - timedelta(seconds=120)  # the drain timeout has already passed

    held = until_settled(
        lambda: drainer.drain(
            OPT_OUT_NODE, started_at=started, grace_seconds=1, timeout_seconds=60
        ),
        timeout=60,
    )
    assert isinstance(held, Held), held
    assert "eval/eval-longrun-0: still terminating after its grace period ran out" in held.reason
    (stuck,) = kube.list_pods("eval")
    assert stuck.terminating

    forced = until_settled(
        lambda: drainer.drain(
            OPT_OUT_NODE,
            started_at=started,
            grace_seconds=1,
            timeout_seconds=60,
            on_timeout=OnTimeout.FORCE,
        ),
        timeout=60,
    )
    assert isinstance(forced, Done), forced
    assert kube.list_pods("eval") == []


def test_a_drained_gangs_gpu_hours_count_until_its_replacements_run(
    sim: SimHandle, kube: KubeClient
) -> None:
    """The 2-node gang loses its member on TRAIN: the job requeues the whole gang, which cannot
    run until the evaluation pod frees its half of OPT_OUT_NODE. The drain's facts name the
    evicted member with its 8 GPUs and its Job; the check over the Job's pods finds no
    replacement while the gang waits, then the replacement's Ready time once it runs."""
    (member,) = [p for p in kube.list_pods_on_node(TRAIN) if p.gpus]
    assert member.gpus == 8 and member.controller is not None
    assert member.controller.kind == "Job"
    assert isinstance(quarantine(kube, TRAIN, WHY), Done)
    rounds: list[Outcome] = []
    outcome = drain_until_done(
        Drainer(kube),
        TRAIN,
        started_at=utcnow(),
        grace_seconds=5,
        timeout_seconds=60,
        on_round=rounds.append,
        sleep=quick_sleep,
    )
    assert isinstance(outcome, Done), outcome
    evicted = evictions(r.facts for r in rounds)
    gang = [e for e in evicted if e.uid == member.uid]
    assert [(e.pod, e.gpus, e.owner_uid) for e in gang] == [(member.key, 8, member.controller.uid)]

    # Requeued, but no node has room for the gang yet: still disrupted, counted to the end.
    wait_for(
        lambda: any(
            p.controller == member.controller and p.uid != member.uid
            for p in kube.list_pods(member.namespace)
        ),
        30,
        "the requeued gang",
    )
    waiting = rescheduled(evicted, kube.list_pods(member.namespace))
    # The old member on the other node still Runs while it terminates: not a replacement.
    (unplaced,) = [e for e in waiting if e.uid == member.uid]
    assert unplaced.rescheduled_at is None

    sim.kubectl("delete", "pod", "-n", "eval", "eval-longrun-0", "--wait=false")
    wait_for(
        lambda: (
            sum(
                p.controller == member.controller and p.running_since is not None
                for p in kube.list_pods(member.namespace)
            )
            == 2
        ),
        60,
        "the gang running again",
    )
    pods = kube.list_pods(member.namespace)
    runs = sorted(
        p.running_since
        for p in pods
        if p.controller == member.controller and p.running_since is not None
    )
    assert all(p.node_name != TRAIN for p in pods if p.controller == member.controller)
    (done,) = [e for e in rescheduled(evicted, pods) if e.uid == member.uid]
    assert done.rescheduled_at == max(runs[0], done.evicted_at)
    much_later = utcnow() + timedelta(hours=3)
    hours = 8 * (done.rescheduled_at - done.evicted_at).total_seconds() / 3600
    assert disrupted_gpu_hours([done], much_later) == pytest.approx(hours)
    assert hours > 0


class _PatchLog(KubeClient):
    """A real client that keeps the node patches it sent, in order."""

    patches: list[dict[str, Any]]

    def _patch_node(self, name: str, patch: Any, content_type: str, what: str) -> Any:
        self.patches = [*getattr(self, "patches", []), patch]
        return super()._patch_node(name, patch, content_type, what)

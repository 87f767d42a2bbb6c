"""`sim serve --topology nvl72 --racks 2` through stock kubectl: the trays with their clique,
rack, tray and spare labels, the spares' taint, one gang Job per clique placed on the clique's
non-spare trays, and the simulator's Job controller and scheduler moving a gang — back into its
rack once a spare is taken into service there, nowhere (Pending) when no clique has room, into
the other rack once it has — and a tray replaced by the node-pool API at its own slot."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.sim import nvl72
from tests.fixtures.sim import SimHandle, start_sim

pytestmark = pytest.mark.integration

WAIT = 120.0  # a generous bound for the simulator's controllers on a loaded machine
CLIQUE = "nvidia.com/gpu.clique"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimHandle]:
    handle = start_sim(
        tmp_path_factory.mktemp("sim-nvl72"),
        rbac=False,
        extra_args=("--topology", "nvl72", "--racks", "2"),
    )
    yield handle
    handle.stop()


def rows(output: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in output.strip().splitlines()]


def wait_for(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT:.0f}s: {what}")
        time.sleep(0.5)


def gang_pods(cluster: SimHandle, gang: str) -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get", "pods", "-n", "training", "-l", f"remediator.io/gang={gang}", "-o", "json"
    )
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def running_on(cluster: SimHandle, gang: str) -> set[str] | None:
    """The trays of the gang's 16 running pods, None until all 16 run."""
    pods = gang_pods(cluster, gang)
    if len(pods) != 16 or any(p["status"].get("phase") != "Running" for p in pods):
        return None
    return {p["spec"]["nodeName"] for p in pods}


def test_trays_carry_clique_rack_and_tray_labels(cluster: SimHandle) -> None:
    table = rows(cluster.kubectl("get", "nodes", "-L", CLIQUE))
    assert table[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "GPU.CLIQUE"]
    assert len(table) == 37
    cliques = {row[0]: row[5] for row in table[1:]}
    assert cliques["nvl-r0-t00"] == f"{nvl72.cluster_uuid(0)}.0"
    assert cliques["nvl-r1-t17"] == f"{nvl72.cluster_uuid(1)}.0"
    rack1 = cluster.kubectl("get", "nodes", "-l", "remediator.io/rack=rack-1", "-o", "name")
    assert len(rack1.split()) == 18
    node = json.loads(cluster.kubectl("get", "node", "nvl-r1-t07", "-o", "json"))
    labels = node["metadata"]["labels"]
    assert labels["remediator.io/tray"] == "7"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-GB200"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"


def test_spares_are_labelled_and_tainted(cluster: SimHandle) -> None:
    spares = cluster.kubectl("get", "nodes", "-l", "remediator.io/spare=true", "-o", "name")
    assert sorted(spares.split()) == [f"node/nvl-r{r}-t{s}" for r in (0, 1) for s in (16, 17)]
    node = json.loads(cluster.kubectl("get", "node", "nvl-r0-t17", "-o", "json"))
    assert {"key": "remediator.io/spare", "value": "true", "effect": "NoSchedule"} in node["spec"][
        "taints"
    ]


def test_one_gang_job_per_clique_on_its_trays(cluster: SimHandle) -> None:
    jobs = rows(cluster.kubectl("get", "jobs", "-n", "training"))
    assert [row[:3] for row in jobs] == [
        ["NAME", "STATUS", "COMPLETIONS"],
        ["gang-r0-c0", "Running", "0/16"],
        ["gang-r1-c0", "Running", "0/16"],
    ]
    wide = rows(cluster.kubectl("get", "pods", "-n", "training", "-o", "wide"))
    assert wide[0][:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    nodes = sorted(row[6] for row in wide[1:] if row[0].startswith("gang-r0-c0-"))
    assert nodes == [f"nvl-r0-t{s:02d}" for s in range(16)]
    pod = gang_pods(cluster, "gang-r1-c0")[0]
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "gang-r1-c0"
    assert pod["metadata"]["ownerReferences"][0]["kind"] == "Job"


def test_gang_rescheduled_into_its_rack_once_a_spare_is_in_service(cluster: SimHandle) -> None:
    # What the controller does for a tray fault with a spare in the rack: the spare's label and
    # taint off, the faulty tray cordoned, the gang's pods deleted.
    cluster.kubectl("label", "node", "nvl-r0-t16", "remediator.io/spare-")
    cluster.kubectl("taint", "node", "nvl-r0-t16", "remediator.io/spare=true:NoSchedule-")
    cluster.kubectl("cordon", "nvl-r0-t03")
    victim = next(
        p for p in gang_pods(cluster, "gang-r0-c0") if p["spec"]["nodeName"] == "nvl-r0-t03"
    )
    cluster.kubectl("delete", "pod", "-n", "training", victim["metadata"]["name"], "--wait=false")
    wanted = {f"nvl-r0-t{s:02d}" for s in range(17)} - {"nvl-r0-t03"}
    wait_for(
        "gang-r0-c0 running again on rack 0 with the spare",
        lambda: running_on(cluster, "gang-r0-c0") == wanted,
    )


def test_gang_pending_without_room_then_in_the_other_rack(cluster: SimHandle) -> None:
    # No spare taken in rack 1: with a tray cordoned its clique is one short and rack 0 is
    # full, so the gang stays Pending, saying why.
    cluster.kubectl("cordon", "nvl-r1-t04")
    victim = next(
        p for p in gang_pods(cluster, "gang-r1-c0") if p["spec"]["nodeName"] == "nvl-r1-t04"
    )
    cluster.kubectl("delete", "pod", "-n", "training", victim["metadata"]["name"], "--wait=false")

    def pending() -> str | None:
        pods = gang_pods(cluster, "gang-r1-c0")
        if len(pods) != 16 or any(p["spec"].get("nodeName") for p in pods):
            return None
        conditions = pods[0]["status"].get("conditions") or []
        return next((c["message"] for c in conditions if c["type"] == "PodScheduled"), None)

    message = wait_for("gang-r1-c0 pending", pending)
    assert "does not fit in any one nvidia.com/gpu.clique domain" in message
    # Rack 0's gang finishes (its Job is deleted): rack 1's gang moves there.
    cluster.kubectl("delete", "job", "-n", "training", "gang-r0-c0", "--wait=false")
    trays = wait_for("gang-r1-c0 running in rack 0", lambda: running_on(cluster, "gang-r1-c0"))
    assert all(t.startswith("nvl-r0-") for t in trays)
    # Never on a tray that takes no work (cordoned, or a spare not taken into service), whatever
    # the tests before this one did to rack 0 on this worker.
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json"))["items"]
    closed = {
        n["metadata"]["name"]
        for n in nodes
        if n["spec"].get("unschedulable")
        or any(t["key"] == "remediator.io/spare" for t in n["spec"].get("taints") or [])
    }
    assert closed and not closed & set(trays), (closed, trays)


def test_replaced_tray_comes_back_at_its_slot_as_a_spare(cluster: SimHandle) -> None:
    before = json.loads(cluster.kubectl("get", "node", "nvl-r0-t03", "-o", "json"))
    response = httpx.post(
        f"{cluster.nodepool_url}/v1/pools/{nvl72.POOL}/replacements",
        json={"node": "nvl-r0-t03", "reason": "xid 79"},
        headers={"Idempotency-Key": "replace-r0-t03"},
        timeout=30,
    )
    assert response.status_code == 202, response.text
    op_url = f"{cluster.nodepool_url}/v1/operations/{response.json()['id']}"

    def done() -> dict[str, Any] | None:
        op: dict[str, Any] = httpx.get(op_url, timeout=30).json()
        return op if op["state"] in ("succeeded", "failed") else None

    op = wait_for("the replacement finishes", done)
    assert op["state"] == "succeeded" and op["new_node"] == "nvl-r0-t03"
    after = json.loads(cluster.kubectl("get", "node", "nvl-r0-t03", "-o", "json"))
    assert after["metadata"]["uid"] != before["metadata"]["uid"]
    labels = after["metadata"]["labels"]
    assert labels[CLIQUE] == f"{nvl72.cluster_uuid(0)}.0"
    assert labels["remediator.io/rack"] == "rack-0"
    assert labels["remediator.io/tray"] == "3"
    assert labels["remediator.io/spare"] == "true"
    assert {"key": "remediator.io/spare", "value": "true", "effect": "NoSchedule"} in after["spec"][
        "taints"
    ]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--racks", "0"), "a positive integer, not 0"),
        (("--spare-trays", "18"), "spare trays must be 0 to 17, not 18"),
        (("--cliques-per-rack", "19"), "cliques per rack must be 1 to 18, not 19"),
    ],
)
def test_impossible_racks_are_refused_before_serving(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "remediator",
            "sim",
            "serve",
            "--topology",
            "nvl72",
            *args,
            "--kubeconfig",
            str(tmp_path / "kubeconfig"),
            "--ready-file",
            str(tmp_path / "ready.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert said in done.stderr
    assert not (tmp_path / "ready.json").exists()

"""Controller overhead in an end-to-end XID 79 remediation, on both of the shipped ladder's
paths: how much of the time from the signal to the finished remediation is the controller's
own, beyond what the workload, the node and the node pool take. Target: median under 2 s on each
path; and the validate step's own overhead (its time minus its checks' programs' run time)
under 2 s, reported separately.

The shipped `xid-79-fallen-off-bus` ladder is notify → cordon → checkpoint → drain → reboot →
diagnose (DCGM level 2) → validate → uncordon, with `on_failure: replace`. So the path depends on
the fault:

    repair   a transient fault (the reboot clears it): reboot, diagnostics pass, validate (DCGM
             level 2), uncordon
    replace  a persistent fault (broken hardware): reboot, diagnostics fail, replace, validate
             the new machine (DCGM level 3), verify

Method: the real CLI twice, as a user runs it: `remediator sim serve` (a 24-node fleet, reboot
5 s, replacement provisioning 3 s) and `remediator run` with the shipped policies (budgets opened
to 50% of a pool and the storm breaker off, see SETTINGS) and the controller's default cadence
(advance every 2 s, poll every 15 s), SQLite, leader election off. Each sample picks a training
node whose trainer pod is running (it speaks the checkpoint handshake: the simulated workload
answers after its `checkpoint-seconds`, 5 s, and exits `shutdown-seconds`, 8 s, after SIGTERM),
injects the XID 79 into the simulator (persistent or not), pushes the same XID 79 signal to the
push API and follows the remediation through the console's JSON API until it finishes; the next
sample starts after it. The paths alternate. Per sample:

    total       push sent → the `succeeded` transition (the timeline's own timestamp)
    checkpoint  the pod's checkpoint-seconds   (the workload's own time to save)
    shutdown    the pod's shutdown-seconds     (its own time to exit after SIGTERM)
    reboot      the simulator's reboot delay   (the node's own time to come back)
    diagnose    the simulated `dcgmi diag -r 2` run time
    provision   the simulator's provisioning delay (replace path only)
    validate    the validation checks' programs' simulated run time: the step runs them all in
                one Job, one after another (nvidia-smi twice and ibstat for the inventory,
                `dcgmi diag` at the step's level, all_reduce_perf)
    overhead    total - the simulated times of the path taken
    validate overhead   time in `validating` - validate (the step's own cost, the target's figure)

Each sample checks that its remediation took the path it models (the states it went through,
its outcome and its new node, and one validation Job whose three checks each passed with a time
of their own) and the bench stops with an error otherwise: an overhead computed for a path not
taken means nothing. The subtracted times are the simulator's configured ones,
which it keeps to its 0.1 s tick; that tick's lag counts as overhead, so the figure errs high.

Usage: python -m bench remediation_overhead            (6 samples per path)
       python -m bench.remediation_overhead --samples N  (N per path; `python -m bench` takes
                                                          only bench names)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from remediator.sim.launch import SimHandle, start_sim
from remediator.sim.node.programs import (
    ALL_REDUCE_SECONDS,
    DIAG_SECONDS,
    IBSTAT_SECONDS,
    SMI_SECONDS,
)
from remediator.store.db import upgrade

TOKEN = "bench-token"
NODES = 24
PROVISION_SECONDS = 3.0
REBOOT_SECONDS = 5.0
DIAG_LEVEL = 2  # the shipped ladder's `diagnose: level: 2`
# The shipped validate step: DCGM level 2 on a repaired node, 3 on a new machine.
VALIDATE_LEVEL = {"repair": 2, "replace": 3}
CHECKS = ("inventory", "dcgm", "nccl")
CHECKPOINT_SECONDS = "sim.remediator.io/checkpoint-seconds"
SHUTDOWN_SECONDS = "sim.remediator.io/shutdown-seconds"
HANDSHAKE = "remediator.io/checkpoint-handshake"
STEPS = (
    "checkpointing",
    "draining",
    "rebooting",
    "diagnosing",
    "validating",
    "uncordoning",
    "replacing",
    "verifying",
)
# The states each path must go through, and those it must not.
PATHS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "repair": (
        frozenset(
            {"checkpointing", "draining", "rebooting", "diagnosing", "validating", "uncordoning"}
        ),
        frozenset({"replacing"}),
    ),
    "replace": (
        frozenset(
            {"checkpointing", "draining", "rebooting", "diagnosing", "replacing", "validating"}
        ),
        frozenset({"uncordoning"}),
    ),
}
POLICIES = Path(__file__).resolve().parent.parent / "policies"
# Budgets and the storm breaker are not what this bench measures: ten XID 79s in a few minutes
# on a 24-node fleet would trip the shipped breaker (10% of the fleet) and queue the rest, and a
# tight pool budget could hold a sample behind the previous one's replaced node. So they are
# opened up; the policies themselves are the shipped ones.
SETTINGS = """
max_unhealthy:
  per_pool: {percent: 50}
  cluster: {percent: 50}
storm_breaker: {enabled: false}
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass(frozen=True)
class Sample:
    path: str
    node: str
    total: float
    simulated: dict[str, float]  # checkpoint, shutdown, reboot, diagnose (, provision)
    steps: dict[str, float]

    @property
    def overhead(self) -> float:
        return self.total - sum(self.simulated.values())

    @property
    def validate_overhead(self) -> float:
        return self.steps.get("validating", 0.0) - self.simulated["validate"]


class Controller:
    """`remediator run` as a subprocess, and its console's API."""

    def __init__(self, workdir: Path, sim: SimHandle) -> None:
        database = workdir / "remediator.db"
        upgrade(f"sqlite:///{database}")
        policies = workdir / "policies"
        policies.mkdir(exist_ok=True)
        for shipped in POLICIES.glob("*.yaml"):
            (policies / shipped.name).write_text(shipped.read_text())
        (policies / "settings.yaml").write_text(SETTINGS)
        config = {
            "kubeconfig": str(sim.kubeconfig),
            "policies_dir": str(policies),
            "database_url": f"sqlite:///{database}",
            "provider": {"url": sim.nodepool_url},
            "web": {"listen": "127.0.0.1:0", "operator_tokens": [TOKEN]},
            "leader_election": {"enabled": False},
        }
        path = workdir / "config.yaml"
        path.write_text(json.dumps(config))
        ready = workdir / "controller.ready.json"
        self.log_path = workdir / "controller.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "remediator", "run"),
                    *("--config", str(path), "--ready-file", str(ready)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(os.environ),
            )
        deadline = time.monotonic() + 120
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"controller did not start:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        url = json.loads(ready.read_text())["web_url"]
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30.0
        )

    def push_xid(self, node: str) -> float:
        signal = {
            "node": node,
            "kind": "xid",
            "code": 79,
            "gpu": 0,
            "source": "bench",
            "observed_at": datetime.now(UTC).isoformat(),
        }
        sent = time.time()
        response = self.http.post("/api/v1/signals", json=[signal])
        if response.status_code != 202:
            raise SystemExit(f"push refused: {response.status_code} {response.text}")
        return sent

    def finished(self, node: str, timeout: float = 180.0) -> dict[str, Any]:
        """The node's remediation once it has left the open states."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            page = self.http.get("/api/v1/remediations", params={"node": node}).json()
            if page["items"]:
                found = page["items"][0]
                if found["state"] in ("succeeded", "failed", "held", "cancelled", "queued"):
                    detail: dict[str, Any] = self.http.get(
                        f"/api/v1/remediations/{found['id']}"
                    ).json()
                    return detail
            time.sleep(0.2)
        raise SystemExit(
            f"{node}: no finished remediation within {timeout:.0f}s (see {self.log_path})"
        )

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def trainer_on(sim: SimHandle, node: str) -> dict[str, Any] | None:
    """The running handshake pod on the node, if there is one."""
    out = sim.kubectl(
        "get", "pods", "-n", "training", "--field-selector", f"spec.nodeName={node}", "-o", "json"
    )
    for pod in json.loads(out)["items"]:
        annotations = pod["metadata"].get("annotations") or {}
        running = pod.get("status", {}).get("phase") == "Running"
        if running and annotations.get(HANDSHAKE) == "true" and CHECKPOINT_SECONDS in annotations:
            return dict(pod)
    return None


def at(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["at"]).replace("Z", "+00:00")).timestamp()


def check_path(path: str, node: str, done: dict[str, Any], visited: set[str]) -> None:
    """Stop the bench when the remediation did not take the path this sample models."""
    needed, excluded = PATHS[path]
    problems = []
    if done["state"] != "succeeded":
        problems.append(f"ended {done['state']}: {done.get('hold_reason') or done.get('error')}")
    if missing := sorted(needed - visited):
        problems.append(f"never went through {', '.join(missing)}")
    if extra := sorted(excluded & visited):
        problems.append(f"went through {', '.join(extra)}")
    replaced = bool(done.get("new_node")) and done.get("new_node") != node
    if replaced != (path == "replace"):
        problems.append(f"new node {done.get('new_node')!r}")
    problems += validation_problems(done["events"])
    if problems:
        raise SystemExit(
            f"{node}: the {path} sample did not take the {path} path: " + "; ".join(problems)
        )


def validation_problems(events: list[dict[str, Any]]) -> list[str]:
    """The validate step this bench subtracts: one Job for all three checks, each passed with
    its own time."""
    jobs = [e for e in events if e["action"] == "validation_started"]
    checks = {
        e["detail"]["check"]: e["detail"] for e in events if e["action"] == "validation_check"
    }
    problems = []
    if len(jobs) != 1 or sorted(jobs[0]["detail"]["checks"]) != sorted(CHECKS):
        problems.append(f"validation Jobs {[j['detail'] for j in jobs]}")
    if sorted(checks) != sorted(CHECKS):
        problems.append(f"checks judged {sorted(checks)}")
    failed = [c for c, d in checks.items() if not d.get("passed") or d.get("seconds") is None]
    if failed:
        problems.append(f"checks failed or untimed: {failed}")
    return problems


def sample(
    controller: Controller, sim: SimHandle, path: str, node: str, pod: dict[str, Any]
) -> Sample:
    annotations = pod["metadata"]["annotations"]
    fault = {"type": "xid", "node": node, "gpu": 0, "code": 79, "persistent": path == "replace"}
    httpx.post(f"{sim.inject_url}/v1/faults", json=fault, timeout=10).raise_for_status()
    pushed = controller.push_xid(node)
    done = controller.finished(node)
    moves = [e for e in done["events"] if e["to_state"] is not None]
    check_path(path, node, done, {e["to_state"] for e in moves})
    entered = {e["to_state"]: at(e) for e in moves}
    left = {e["from_state"]: at(e) for e in moves if e["from_state"]}
    steps = {s: left[s] - entered[s] for s in STEPS if s in entered and s in left}
    steps["detect"] = entered["detected"] - pushed
    simulated = {
        "checkpoint": float(annotations[CHECKPOINT_SECONDS]),
        "shutdown": float(annotations[SHUTDOWN_SECONDS]),
        "reboot": REBOOT_SECONDS,
        "diagnose": DIAG_SECONDS[DIAG_LEVEL],
    }
    if path == "replace":
        simulated["provision"] = PROVISION_SECONDS
    simulated["validate"] = validation_seconds(VALIDATE_LEVEL[path])
    return Sample(path, node, entered["succeeded"] - pushed, simulated, steps)


def validation_seconds(level: int) -> float:
    """The one Job's programs, one after another."""
    return SMI_SECONDS * 2 + IBSTAT_SECONDS + DIAG_SECONDS[level] + ALL_REDUCE_SECONDS


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=6, help="samples per path")
    parser.add_argument("--keep", type=Path, help="work (and leave the logs) in this directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        workdir = args.keep or Path(tmp)
        sim = start_sim(
            workdir / "sim",
            nodes=NODES,
            provision_delay=PROVISION_SECONDS,
            reboot_delay=REBOOT_SECONDS,
        )
        try:
            controller = Controller(workdir, sim)
            try:
                samples = run(controller, sim, args.samples)
            finally:
                controller.stop()
        finally:
            sim.stop()
    report(samples)
    return 0


def run(controller: Controller, sim: SimHandle, wanted: int) -> list[Sample]:
    """`wanted` samples of each path, alternating, each on a node not remediated before (a
    second XID 79 within a week is another policy's: straight to replacement)."""
    # The simulated pool keeps a spare node or two; give it one per replacement.
    spare = {"type": "spare_capacity", "pool": "h100-train", "spare": wanted + 2}
    httpx.post(f"{sim.inject_url}/v1/nodepool-faults", json=spare, timeout=10).raise_for_status()
    samples: list[Sample] = []
    used: set[str] = set()
    order = [path for _ in range(wanted) for path in ("replace", "repair")]
    for path in order:
        found = None
        for _ in range(60):  # a replaced node's trainer needs a moment to run elsewhere
            found = _next_trainer(sim, used)
            if found is not None:
                break
            time.sleep(1.0)
        if found is None:
            raise SystemExit(f"only {len(samples)} nodes ran a trainer; wanted {len(order)}")
        node, pod = found
        used.add(node)
        result = sample(controller, sim, path, node, pod)
        samples.append(result)
        print(
            f"  {path:7} {node}: total {result.total:.2f} s, overhead {result.overhead:.2f} s",
            flush=True,
        )
    return samples


def _next_trainer(sim: SimHandle, used: set[str]) -> tuple[str, dict[str, Any]] | None:
    nodes = json.loads(sim.kubectl("get", "nodes", "-o", "json"))["items"]
    names = sorted(n["metadata"]["name"] for n in nodes if "train" in n["metadata"]["name"])
    for node in names:
        if node in used:
            continue
        pod = trainer_on(sim, node)
        if pod is not None:
            return node, pod
    return None


def report(samples: list[Sample]) -> None:
    paths = ("replace", "repair")
    print()
    counts = ", ".join(f"{sum(s.path == p for s in samples)} {p}" for p in paths)
    print(f"XID 79 remediations ({counts}), {NODES}-node simulated fleet, shipped policies")
    print()
    parts = ["checkpoint", "shutdown", "reboot", "diagnose", "provision", "validate"]
    columns = ["total", *parts, "overhead", "validate overhead", "detect", *STEPS]
    print("| path | node | " + " | ".join(f"{c} s" for c in columns) + " |")
    print("| --- | --- | " + " | ".join("---:" for _ in columns) + " |")
    for s in samples:
        values = [s.total, *(s.simulated.get(p, 0.0) for p in parts), s.overhead]
        values.append(s.validate_overhead)
        values += [s.steps.get(step, 0.0) for step in ("detect", *STEPS)]
        print(f"| {s.path} | {s.node} | " + " | ".join(f"{v:.2f}" for v in values) + " |")
    print()
    for path in paths:
        totals = [s.total for s in samples if s.path == path]
        print(
            f"{path}: total median {statistics.median(totals):.2f} s "
            f"p90 {percentile(totals, 0.9):.2f} s"
        )
    for path in paths:
        checks = [s.validate_overhead for s in samples if s.path == path]
        print(
            f"{path}: validate step overhead median {statistics.median(checks):.2f} s "
            f"p90 {percentile(checks, 0.9):.2f} s (target < 2 s beyond its checks' own time)"
        )
    for path in paths:
        overheads = [s.overhead for s in samples if s.path == path]
        print(
            f"{path}: overhead median {statistics.median(overheads):.2f} s "
            f"p90 {percentile(overheads, 0.9):.2f} s"
        )


if __name__ == "__main__":
    sys.exit(main())

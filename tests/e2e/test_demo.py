"""`remediator demo` end to end: the real command as a subprocess with a short fault interval. It
prints the console URL and an operator token; with them the JSON API must show a remediation that
succeeded; Ctrl-C (SIGINT) must stop it with exit 0 and leave no process it started behind.

With the push relay (what a machine without Prometheus gets) on the default 16 nodes, the whole
first round must play out as the README promises: succeeded, held by an opt-out pod, awaiting
approval, held by a PodDisruptionBudget, held for lack of spare capacity. With a real Prometheus
(when installed), on a smaller fleet, a success is enough: the rest is the same code."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from remediator.demo.supervisor import find_prometheus
from tests.fixtures.processes import read_proc
from tests.fixtures.slurm import slurm_processes

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.timeout(300)]

START_TIMEOUT = 120.0
SUCCESS_TIMEOUT = 150.0
STOP_TIMEOUT = 60.0


class DemoProcess:
    """The demo with its stdout collected line by line in the background."""

    def __init__(self, data_dir: Path, signals: str, nodes: int, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "remediator",
                "demo",
                "--nodes",
                str(nodes),
                "--port",
                "0",
                "--fault-interval",
                "3",
                "--seed",
                "7",
                "--signals",
                signals,
                "--data-dir",
                str(data_dir),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.output, re.MULTILINE)
            if found:
                return found
            if self.proc.poll() is not None:
                self._reader.join(timeout=5)
                raise AssertionError(f"demo exited {self.proc.returncode}:\n{self.output}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} in the demo's output:\n{self.output}")
            time.sleep(0.1)

    def descendants(self) -> set[int]:
        """Every process below the demo, from /proc (children run in their own sessions, so
        their process group says nothing about who started them)."""
        parents: dict[int, int] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        found: set[int] = set()
        frontier = {self.proc.pid}
        while frontier:
            children = {pid for pid, parent in parents.items() if parent in frontier}
            frontier = children - found
            found |= children
        return found

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def command_lines(pids: set[int]) -> set[bytes]:
    """The command lines of those still there: a short-lived child (an `scontrol` the demo ran)
    can exit between the listing and the read."""
    read = (read_proc(Path(f"/proc/{pid}/cmdline")) for pid in pids)
    return {raw.replace(b"\0", b" ") for raw in read if raw}


def remediations(client: httpx.Client, console: str, token: str) -> list[dict[str, Any]]:
    response = client.get(
        f"{console}api/v1/remediations",
        params={"limit": 500},
        headers={"Authorization": f"Bearer {token}"},
    )
    response.raise_for_status()
    items: list[dict[str, Any]] = response.json()["items"]
    return items


@pytest.fixture
def demo_factory(tmp_path: Path) -> Iterator[Any]:
    started: list[DemoProcess] = []

    def start(signals: str, nodes: int, *extra: str) -> DemoProcess:
        demo = DemoProcess(tmp_path / "demo", signals, nodes, *extra)
        started.append(demo)
        return demo

    yield start
    for demo in started:
        # A failed test must not leave the stack running: SIGINT, and SIGKILL as a last resort
        # (its children then get SIGTERM from the kernel, see supervisor._die_with_parent).
        if demo.proc.poll() is None:
            demo.proc.send_signal(signal.SIGINT)
            try:
                demo.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                demo.kill()


def story_told(items: list[dict[str, Any]]) -> bool:
    """Every state the first round is built to show, each at least once."""

    def seen(state: str, reason: str = "") -> bool:
        return any(r["state"] == state and reason in (r["hold_reason"] or "") for r in items)

    return (
        seen("succeeded")
        and seen("held_by_opt_out", "remediator.io/disable-auto-replace")
        and seen("awaiting_approval")
        and seen("held", "disruption budget")
        and seen("held", "no spare capacity")
    )


@pytest.mark.parametrize(("signals", "nodes"), [("push", 16), ("prometheus", 8)])
def test_demo_remediates_and_stops_cleanly_on_ctrl_c(
    demo_factory: Any, tmp_path: Path, signals: str, nodes: int
) -> None:
    if signals == "prometheus" and find_prometheus() is None:
        pytest.skip("prometheus is not installed")
    demo: DemoProcess = demo_factory(signals, nodes)
    full_story = signals == "push"
    console = demo.wait_for(r"^  console\s+(http://\S+/)$", START_TIMEOUT).group(1)
    token = demo.wait_for(r"^  token\s+(\S+)$", 5).group(1)
    assert (tmp_path / "demo" / "operator-token").read_text().strip() == token
    expected = "Prometheus at" if signals == "prometheus" else "relays the simulated DCGM"
    assert expected in demo.output

    with httpx.Client(timeout=10.0) as client:
        response = client.get(f"{console}api/v1/remediations")
        assert response.status_code == 401  # the token is what opens it
        deadline = time.monotonic() + SUCCESS_TIMEOUT
        while True:
            items = remediations(client, console, token)
            done = [r for r in items if r["state"] == "succeeded"]
            if done and (story_told(items) or not full_story):
                break
            assert time.monotonic() < deadline, f"not there yet: {items}\n{demo.output}"
            time.sleep(1.0)
    record = done[0]
    assert record["new_node"] and record["new_node"] != record["node"]
    assert record["policy"] in {
        "xid-79-fallen-off-bus",
        "xid-48-double-bit-ecc",
        "gpu-overheat",
        "nvlink-error-bursts",
        "ib-link-down",
    }
    assert "fault 1: XID 79" in demo.output

    children = demo.descendants()
    names = command_lines(children)
    assert any(b"sim serve" in n for n in names) and any(b" run --config" in n for n in names)
    if signals == "prometheus":
        assert any(b"prometheus" in n for n in names)

    demo.proc.send_signal(signal.SIGINT)
    assert demo.proc.wait(timeout=STOP_TIMEOUT) == 0, demo.output
    assert "SIGINT: stopping" in demo.output
    assert "stopped. Data and logs are kept in" in demo.output
    deadline = time.monotonic() + 60
    while left := [pid for pid in children if running(pid)]:
        assert time.monotonic() < deadline, f"left running: {left}"
        time.sleep(0.1)
    assert os.path.exists(tmp_path / "demo" / "logs" / "controller.log")


def test_demo_with_slurm_requeues_a_job_that_resumes_from_its_checkpoint(
    demo_factory: Any, tmp_path: Path
) -> None:
    """`demo --slurm`: a real Slurm beside the cluster, checkpointing jobs on it; a remediation of
    a node that ran one drains its Slurm node, requeues the job (which checkpoints on SIGTERM and
    resumes elsewhere), resumes the Slurm node, and Ctrl-C stops slurmctld and the slurmds too."""
    demo: DemoProcess = demo_factory("push", 8, "--slurm")
    console = demo.wait_for(r"^  console\s+(http://\S+/)$", START_TIMEOUT).group(1)
    token = demo.wait_for(r"^  token\s+(\S+)$", 5).group(1)
    conf = demo.wait_for(r"^  slurm\s+SLURM_CONF=(\S+) squeue", 5).group(1)
    demo.wait_for(r"submitted \d+ checkpointing Slurm jobs", 5)
    demo.wait_for(r"checkpointing jobs [\d,]+: the first fault hits the node of one of them", 5)
    # The first fault hits a node running one of them, and says which job to watch.
    first = demo.wait_for(r"fault 1: XID 79 .* on (\S+) GPU \d+, which runs Slurm job (\d+)", 120)
    demo.wait_for(rf"Slurm: {first.group(1)} drained, job {first.group(2)} gets SIGTERM", 5)
    jobs_dir = tmp_path / "demo" / "slurm-jobs"

    def requeued(client: httpx.Client) -> dict[str, Any] | None:
        for item in remediations(client, console, token):
            # The first fault's remediation: a later fault's node may be where the requeued job
            # was just being started again, and killed there before it could checkpoint.
            if item["state"] != "succeeded" or item["node"] != first.group(1):
                continue
            response = client.get(
                f"{console}api/v1/remediations/{item['id']}",
                headers={"Authorization": f"Bearer {token}"},
            )
            response.raise_for_status()
            detail: dict[str, Any] = response.json()
            if detail["slurm_jobs"]:
                return detail
        return None

    with httpx.Client(timeout=10.0) as client:
        deadline = time.monotonic() + SUCCESS_TIMEOUT
        while (detail := requeued(client)) is None:
            assert time.monotonic() < deadline, demo.output
            time.sleep(1.0)
    node = detail["node"]
    commands = [str(e["detail"].get("command")) for e in detail["events"] if e["action"] == "slurm"]
    assert commands[0].startswith(f"scontrol update nodename={node} state=drain reason=")
    assert f"remediator #{detail['id']}: {detail['policy']}" in commands[0]
    job = detail["slurm_jobs"][0]["job"]
    assert str(job) == first.group(2)
    assert f"scontrol requeue {job}" in commands
    assert commands[-1] == f"scontrol update nodename={node} state=resume"
    log = (jobs_dir / f"log.{job}").read_text()
    assert f"SIGTERM: checkpointed on {node}" in log
    deadline = time.monotonic() + 60
    while f"from {node} on " not in (log := (jobs_dir / f"log.{job}").read_text()):
        assert time.monotonic() < deadline, log
        time.sleep(0.5)
    env = {**os.environ, "SLURM_CONF": conf}
    queue = subprocess.run(
        ["squeue", "-h", "-j", str(job), "-o", "%T"], env=env, capture_output=True, text=True
    )
    assert queue.stdout.strip() in {"RUNNING", "PENDING"}, queue

    children = demo.descendants()
    names = command_lines(children)
    assert any(b"slurmctld" in n for n in names) and any(b"slurmd" in n for n in names)
    demo.proc.send_signal(signal.SIGINT)
    assert demo.proc.wait(timeout=STOP_TIMEOUT) == 0, demo.output
    deadline = time.monotonic() + 60
    while left := [pid for pid in children if running(pid)]:
        assert time.monotonic() < deadline, f"left running: {left}"
        time.sleep(0.1)
    # Nor the jobs' slurmstepd and scripts, which are no descendants of the demo.
    assert slurm_processes(conf) == []


def test_demo_on_aws_without_faults_replaces_an_injected_xid_79_node_through_the_asg(
    demo_factory: Any,
) -> None:
    """`remediator demo --cloud aws --no-faults`, then the `sim inject … --xid 79 --persistent`
    its banner prints, run as printed: a GPU a reboot does not bring back (a plain XID 79 is
    repaired by the reboot, no replacement), so the diagnostics fail, the node is replaced
    through the Auto Scaling group, and the timeline names the group, the scaling activity and
    both instances."""
    demo: DemoProcess = demo_factory(
        "push", 6, "--cloud", "aws", "--no-faults", "--provision-delay", "0.5"
    )
    console = demo.wait_for(r"^  console\s+(http://\S+/)$", START_TIMEOUT).group(1)
    token = demo.wait_for(r"^  token\s+(\S+)$", 5).group(1)
    inject = demo.wait_for(r"^  inject\s+(\S+ sim inject .+)$", 5).group(1)
    assert "none (--no-faults)" in demo.output
    node = "h100-train-0000"
    assert f"--node {node} --gpu 0 --xid 79 --persistent" in inject  # taken literally
    assert "Auto Scaling group h100-train" in demo.output
    injected = subprocess.run(
        shlex.split(inject),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert injected.returncode == 0, injected.stderr

    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=10.0, headers=headers) as client:
        deadline = time.monotonic() + SUCCESS_TIMEOUT
        while True:
            items = remediations(client, console, token)
            mine = [r for r in items if r["node"] == node]
            if mine and mine[0]["state"] in ("succeeded", "failed"):
                break
            assert time.monotonic() < deadline, f"not there yet: {items}\n{demo.output}"
            time.sleep(0.5)
        assert [r["node"] for r in items] == [node], items  # nothing else was touched
        assert mine[0]["state"] == "succeeded", mine[0]
        assert mine[0]["policy"] == "xid-79-fallen-off-bus"
        detail = client.get(f"{console}api/v1/remediations/{mine[0]['id']}").json()
    named = [e["detail"] for e in detail["events"] if "new_instance" in (e["detail"] or {})]
    assert named, json.dumps(detail["events"], indent=1)
    last = named[-1]
    assert last["auto_scaling_group"] == "h100-train"
    assert last["old_instance"].startswith("i-") and last["new_instance"].startswith("i-")
    assert last["old_instance"] != last["new_instance"]
    assert last.get("launch_activity"), last
    assert mine[0]["new_node"].startswith("ip-") and mine[0]["outcome"] == "replaced"


def test_demo_with_nvl72_racks_shows_them_in_the_rack_view(
    demo_factory: Any, tmp_path: Path
) -> None:
    """`demo --topology nvl72`: two racks of 18 trays, their gang jobs and a tray's remediation
    in the console's rack view and its API."""
    demo: DemoProcess = demo_factory("push", 16, "--topology", "nvl72", "--no-faults")
    console = demo.wait_for(r"^  console\s+(http://\S+/)$", START_TIMEOUT).group(1)
    token = demo.wait_for(r"^  token\s+(\S+)$", 5).group(1)
    assert demo.wait_for(r"^  racks\s+(http://\S+/racks):", 5).group(1) == f"{console}racks"
    assert "2 GB200 NVL72 racks" in demo.output
    inject = demo.wait_for(r"^  inject\s+(.+) --node NODE --gpu 0 --xid 79$", 5).group(1)
    command = [*shlex.split(inject), "--node", "nvl-r0-t03", "--gpu", "0", "--xid", "79"]
    subprocess.run(command, check=True, capture_output=True, timeout=60)

    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(timeout=10.0, headers=auth) as client:
        deadline = time.monotonic() + SUCCESS_TIMEOUT
        while True:
            listed = client.get(f"{console}api/v1/domains").json()
            racks = {d["rack"]: d for d in listed["domains"]}
            rack0 = racks.get("rack-0")
            if rack0 and any(r["node"] == "nvl-r0-t03" for r in rack0["remediations"]):
                break
            assert time.monotonic() < deadline, f"no remediation in rack-0: {listed}"
            time.sleep(1.0)
        assert sorted(racks) == ["rack-0", "rack-1"]
        assert all(len(d["trays"]) == 18 for d in racks.values())
        assert [j["name"] for j in racks["rack-1"]["jobs"]] == ["gang-r1-c0"]
        assert racks["rack-1"]["remediations"] == []
        page = client.get(f"{console}racks")
        assert page.status_code == 200
        assert "rack-0" in page.text and "rack-1" in page.text

    demo.proc.send_signal(signal.SIGINT)
    assert demo.proc.wait(timeout=STOP_TIMEOUT) == 0, demo.output

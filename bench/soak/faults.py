"""Carrying out the schedule: each fault at its time, in its own thread (a database outage may
overlap a killed leader; two faults of one kind never overlap), through the same interfaces an
operator or a broken system would use: the simulator's inject API, `kubectl`, `pg_ctl`, signals
to processes, slurmctld's own command line, the console API.

Each fault says whether it took effect (`Outcome`); some can only be judged later (a dead new
machine arrives when a replacement happens) and carry a `confirm` the soak asks at the end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.soak.database import sqlite_database
from bench.soak.journal import Journal
from bench.soak.schedule import Planned
from bench.soak.stack import (
    OPERATOR_TOKEN,
    QUARANTINE_TAINT,
    Replica,
    Stack,
    fence_items,
    fenced,
    is_ready,
)
from remediator.demo.slurm_jobs import submit_demo_jobs
from remediator.sim.kube.api.kobj import POOL_LABEL
from tests.integration.engine_support import ControllerProcess

OURS = "remediator.io/"  # our taints, marks and labels
CONTROLLER_AGENT = "remediator/"  # the controllers' User-Agent (kube faults hit them only)
NVLINK_BURST_SPACING = 3.0
FENCED_WAIT = 30.0  # a human waits this long for something to act on (a fenced node, a hold)
SLURMCTLD_SECONDS = 60.0
COMMAND_PATIENCE = 60.0  # a human command is asked again this long while the API fails
REPLANT_SECONDS = 120.0  # a node a fault was planted on is left alone this long


class ConsoleRefused(RuntimeError):
    """The console answered 4xx: what was asked does not fit."""


@dataclass
class Outcome:
    took_effect: bool
    target: str = ""
    note: str = ""
    # Judged at the end: (took effect, what was seen).
    confirm: Callable[[], tuple[bool, str]] | None = None


@dataclass
class Fired:
    planned: Planned
    outcome: Outcome | None = None
    done: threading.Event = field(default_factory=threading.Event)


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


class FaultRunner:
    def __init__(
        self,
        stack: Stack,
        journal: Journal,
        schedule: tuple[Planned, ...],
        stop: threading.Event,
        say: Callable[[str], None],
        end_at: float,
    ) -> None:
        self.stack = stack
        self.journal = journal
        self.schedule = schedule
        self.stop = stop
        self.say = say
        self.end_at = end_at  # monotonic: the soak's end, which open-ended waits stop at
        self.fired: list[Fired] = []
        self._threads: list[threading.Thread] = []
        self._kind_locks: dict[str, threading.Lock] = {}
        self._pick_lock = threading.Lock()
        self._used: dict[str, float] = {}  # node → when a fault was last planted on it
        self._empty = 0
        assert stack.sim is not None and stack.kube is not None
        self.sim = stack.sim
        self.kube = stack.kube
        self.http = httpx.Client(timeout=15.0)

    # -- the schedule --------------------------------------------------------------------------

    def run(self) -> None:
        for planned in self.schedule:
            if self.stop.wait(max(0.0, self.journal.started + planned.at - time.monotonic())):
                return
            fired = Fired(planned)
            self.fired.append(fired)
            thread = threading.Thread(
                target=self._episode, args=(fired,), name=f"fault-{planned.kind}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))

    def _episode(self, fired: Fired) -> None:
        kind = fired.planned.kind
        lock = self._kind_locks.setdefault(kind, threading.Lock())
        with lock:
            try:
                outcome = getattr(self, f"_{kind}")(fired.planned.params)
            except Exception as exc:  # a fault that could not be carried out is reported
                outcome = Outcome(False, note=f"could not be injected: {exc}")
        fired.outcome = outcome
        fired.done.set()
        state = "took effect" if outcome.took_effect else "did not take effect"
        if outcome.confirm is not None and outcome.took_effect:
            state = "injected (judged at the end)"
        target = f" on {outcome.target}" if outcome.target else ""
        self.say(f"fault {kind}{target}: {state}; {outcome.note}")

    def confirm_all(self) -> None:
        """The faults whose effect shows later: judged now."""
        for fired in self.fired:
            outcome = fired.outcome
            if outcome is not None and outcome.took_effect and outcome.confirm is not None:
                try:
                    outcome.took_effect, seen = outcome.confirm()
                except (httpx.HTTPError, RuntimeError) as exc:
                    outcome.took_effect, seen = False, f"could not be judged: {exc}"
                outcome.note += f"; {seen}"
                outcome.confirm = None

    # -- shared helpers ------------------------------------------------------------------------

    def inject(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post(f"{self.sim.inject_url}{path}", json=body)
        if response.status_code >= 400:
            raise RuntimeError(f"{path}: {response.status_code} {response.text[:300]}")
        answer: dict[str, Any] = response.json()
        return answer

    def console(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        patience: float = 0.0,
    ) -> Any:
        """The console API of whichever controller answers, the leader's first. An answer of
        5xx, or none, is asked again for `patience` seconds (the database may be down just
        now); a 4xx is the answer."""
        headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
        deadline = time.monotonic() + patience
        while True:
            last = "no controller serves"
            for url in self.stack.console_urls():
                try:
                    response = self.http.request(method, f"{url}{path}", json=body, headers=headers)
                except httpx.HTTPError as exc:
                    last = str(exc)
                    continue
                if response.status_code < 500:
                    if response.status_code >= 400:
                        raise ConsoleRefused(
                            f"{path}: {response.status_code} {response.text[:300]}"
                        )
                    return response.json()
                last = f"{response.status_code} {response.text[:200]}"
            if time.monotonic() > deadline or self.stop.wait(2.0):
                raise RuntimeError(f"{method} {path}: {last}")

    def open_nodes(self) -> set[str]:
        """Nodes with an open remediation, as far as the API answers now (empty if it does not:
        the Kubernetes side of `pick` still keeps fenced nodes out)."""
        try:
            page = self.console("GET", "/api/v1/remediations?limit=500")
        except RuntimeError:
            return set()
        closed = {"succeeded", "cancelled"}
        return {r["node"] for r in page["items"] if r["state"] not in closed}

    def pick(self, fraction: float) -> dict[str, Any] | None:
        """A healthy node: Ready, schedulable, without our taints, without an opt-out pod, under
        no remediation, nothing planted on it lately (its signal may not have opened one yet);
        the `fraction`-th of them by name."""
        busy = self.open_nodes()
        with self._pick_lock:
            now = time.monotonic()
            lately = {n for n, at in self._used.items() if now - at < REPLANT_SECONDS}
            hosts = self.kube.opt_out_hosts()
            fitting = sorted(
                (
                    n
                    for n in self.kube.nodes()
                    if is_ready(n)
                    and not n["spec"].get("unschedulable")
                    and not any(
                        str(t.get("key", "")).startswith(OURS)
                        for t in n["spec"].get("taints") or []
                    )
                    and n["metadata"]["name"] not in hosts | busy | lately
                ),
                key=lambda n: str(n["metadata"]["name"]),
            )
            if not fitting:
                return None
            chosen = fitting[min(len(fitting) - 1, int(fraction * len(fitting)))]
            self._used[chosen["metadata"]["name"]] = now
            return chosen

    def plant_xid(self, node: str, gpu: int, code: int, persistent: bool) -> None:
        body = {"type": "xid", "node": node, "gpu": gpu, "code": code, "persistent": persistent}
        self.inject("/v1/faults", body)
        self.journal.plant(node, f"XID {code} on GPU {gpu}")

    # -- faults that plant a signal ------------------------------------------------------------

    def _xid(self, p: dict[str, Any]) -> Outcome:
        node = self.pick(p["pick"])
        if node is None:
            return Outcome(False, note="no healthy node left")
        name = node["metadata"]["name"]
        self.plant_xid(name, p["gpu"], p["code"], p["persistent"])
        lasting = " (for good)" if p["persistent"] else ""
        return Outcome(True, name, f"XID {p['code']}{lasting} on GPU {p['gpu']}")

    def _nvlink(self, p: dict[str, Any]) -> Outcome:
        node = self.pick(p["pick"])
        if node is None:
            return Outcome(False, note="no healthy node left")
        name = node["metadata"]["name"]
        for i, (gpu, count) in enumerate(zip(p["gpus"], p["counts"], strict=True)):
            if i and self.stop.wait(NVLINK_BURST_SPACING):
                return Outcome(False, name, "the soak ended between the bursts")
            self.inject("/v1/faults", {"type": "nvlink_errors", "node": name, "gpu": gpu,
                                       "count": count})  # fmt: skip
        self.journal.plant(name, f"NVLink bursts on GPUs {p['gpus']}")
        return Outcome(True, name, f"NVLink error bursts on GPUs {p['gpus']}")

    def _dead_on_arrival(self, pool: str) -> list[dict[str, Any]]:
        listed = self.http.get(f"{self.sim.inject_url}/v1/nodepool-faults").json()["faults"]
        return [d for d in listed.get("dead_on_arrival") or [] if d.get("pool") == pool]

    def _doa(self, p: dict[str, Any]) -> Outcome:
        node = self.pick(p["pick"])
        if node is None:
            return Outcome(False, note="no healthy node left")
        name, pool = node["metadata"]["name"], node["metadata"]["labels"][POOL_LABEL]
        before = len(self._dead_on_arrival(pool))
        rule = {"type": "doa_next", "pool": pool, "fault": p["arrival"], "count": p["count"]}
        self.inject("/v1/nodepool-faults", rule)
        self.plant_xid(name, p["gpu"], 79, True)

        def confirm() -> tuple[bool, str]:
            arrived = self._dead_on_arrival(pool)[before:]
            names = ", ".join(d["node"] for d in arrived)
            return bool(arrived), (
                f"dead on arrival: {names}" if arrived else "no new machine arrived dead"
            )

        what = f"{p['count']} x {p['arrival']['type']}"
        return Outcome(True, name, f"pool {pool}'s next machines: {what}; XID 79", confirm)

    def _opt_out(self, p: dict[str, Any]) -> Outcome:
        node = self.pick(p["pick"])
        if node is None:
            return Outcome(False, note="no healthy node left")
        name = node["metadata"]["name"]
        body = {
            "scope": "node",
            "target": name,
            "until": f"{p['until_seconds']}s",
            "reason": "chaos soak: the owner's run must not be disturbed",
        }
        self.console("POST", "/api/v1/optouts", body, patience=COMMAND_PATIENCE)
        self.plant_xid(name, p["gpu"], 79, True)

        def confirm() -> tuple[bool, str]:
            page = self.console("GET", f"/api/v1/remediations?node={name}&limit=50")
            for item in page["items"]:
                detail = self.console("GET", f"/api/v1/remediations/{item['id']}")
                moves = [e["to_state"] for e in detail["events"]]
                if "held_by_opt_out" in moves:
                    after = "moved on" if moves[-1] != "held_by_opt_out" else "still held"
                    return True, f"#{item['id']} was held_by_opt_out, then {after}"
            return False, "no remediation of the node was held by the opt-out"

        return Outcome(True, name, f"opt-out until +{p['until_seconds']}s; XID 79", confirm)

    def _operations(self) -> list[dict[str, Any]]:
        ops: list[dict[str, Any]] = self.http.get(f"{self.sim.nodepool_url}/v1/operations").json()[
            "operations"
        ]
        return ops

    def _provider_fail(self, p: dict[str, Any]) -> Outcome:
        node = self.pick(p["pick"])
        if node is None:
            return Outcome(False, note="no healthy node left")
        name = node["metadata"]["name"]
        known = {op["id"] for op in self._operations()}
        self.inject("/v1/nodepool-faults", {"type": "fail_next", "count": 1})
        self.plant_xid(name, p["gpu"], 79, True)

        def confirm() -> tuple[bool, str]:
            failed = [
                op
                for op in self._operations()
                if op["id"] not in known
                and (op.get("error") or {}).get("code") == "provisioning_failed"
            ]
            if not failed:
                return False, "no replacement operation failed"
            return True, f"operation {failed[0]['id']} replacing {failed[0]['node']} failed"

        return Outcome(True, name, "the next replacement fails; XID 79", confirm)

    def _provider_api(self, p: dict[str, Any]) -> Outcome:
        node = self.pick(p["pick"])
        if node is None:
            return Outcome(False, note="no healthy node left")
        name = node["metadata"]["name"]
        rule = dict(p["rule"])
        kind = rule["type"]
        self.inject("/v1/nodepool-faults", rule)
        self.plant_xid(name, p["gpu"], 79, True)
        # The XID's replacement may wait behind the budgets: armed until a request meets it, or
        # the soak's end.
        while not self.stop.wait(2.0):
            left = self.http.get(f"{self.sim.inject_url}/v1/nodepool-faults").json()["faults"]
            remaining = int(left[kind]["count"])
            if remaining < int(rule["count"]):
                what = f"{int(rule['count']) - remaining} replacement request(s) met {rule}"
                return Outcome(True, name, what)
            if time.monotonic() > self.end_at:
                break
        # Disarmed, so that it does not meet some later, unplanned request.
        self.inject("/v1/nodepool-faults", {"type": kind, "count": 0})
        return Outcome(False, name, f"no replacement request met {rule} before the soak's end")

    # -- faults in what the controller stands on -----------------------------------------------

    def _kube_api(self, p: dict[str, Any]) -> Outcome:
        seen = int(
            self.http.get(f"{self.sim.inject_url}/v1/kube-requests?since=999999999").json()["total"]
        )
        rule = {**p["rule"], "user_agent": CONTROLLER_AGENT, "duration_seconds": p["seconds"]}
        window = self.journal.disturb("kube_api")
        try:
            answer = self.inject("/v1/kube-faults", rule)
            self.stop.wait(p["seconds"])
        finally:
            self.journal.settle(window)
        log = self.http.get(f"{self.sim.inject_url}/v1/kube-requests?since={seen}").json()
        if rule["type"] == "delay":  # the log marks no delayed request: each of theirs was
            hit = sum(1 for r in log["requests"] if CONTROLLER_AGENT in r["user_agent"])
        else:
            hit = sum(1 for r in log["requests"] if r.get("injected"))
        ended = "watch(es) ended" in str(answer.get("message", ""))
        what = f"{p['rule']} for {p['seconds']}s: {hit} controller request(s) hit"
        return Outcome(hit > 0 or ended, "", what + ("; open watches ended" if ended else ""))

    def _db_outage(self, p: dict[str, Any]) -> Outcome:
        postgres = self.stack.postgres
        if postgres is None:
            return Outcome(False, note="no PostgreSQL (--db sqlite)")
        window = self.journal.disturb("db_outage")
        try:
            postgres.stop("fast")
            down = not postgres.running()
            self.stop.wait(p["seconds"])
        finally:
            postgres.start()
            self.journal.settle(window)
        return Outcome(down, "", f"PostgreSQL down for {p['seconds']}s, then back")

    def _controller_kill(self, p: dict[str, Any]) -> Outcome:
        leader = self.kube.leader()
        replicas = list(self.stack.replicas.values())
        if p["which"] == "leader":
            chosen = [r for r in replicas if r.identity == leader]
        else:
            chosen = [r for r in replicas if r.identity != leader]
        if not chosen or chosen[0].process is None:
            return Outcome(False, note=f"no {p['which']} to kill (lease holder {leader})")
        replica = chosen[0]
        window = self.journal.disturb("controller_kill") if p["which"] == "leader" else None
        with self.stack.lock:
            self.stack.expected_down.add(replica.name)
        try:
            assert replica.process is not None
            replica.process.kill()
            code = replica.process.proc.returncode
            self.stop.wait(p["down_seconds"])
            self.stack.start_replica(replica)
        finally:
            with self.stack.lock:
                self.stack.expected_down.discard(replica.name)
            if window is not None:
                self.journal.settle(window)
        return Outcome(
            code == -signal.SIGKILL,
            replica.identity,
            f"the {p['which']} SIGKILLed (exit {code}), started again after {p['down_seconds']}s",
        )

    def _empty_db_controller(self, p: dict[str, Any]) -> Outcome:
        self._empty += 1
        name = f"empty-{self._empty}"
        if self.stack.postgres is not None:
            url = self.stack.postgres.create_database(f"soak_empty_{self._empty}")
        else:
            url = sqlite_database(self.stack.workdir, name)
        # Its own store and no election (the shipped Role allows one Lease name): a second
        # deployment that acts on the same cluster, as a wrong database_url would make one.
        config = self.stack.write_config(
            name, url, leader_election={"enabled": False}, signals=False
        )
        process = ControllerProcess(self.stack.workdir, config, f"controller-{name}")
        self.stack.extra.append(process)
        foreign = 0
        try:
            process.wait_ready(timeout=240)
            deadline = time.monotonic() + p["seconds"]
            headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
            while not self.stop.wait(2.0) and time.monotonic() < deadline:
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    fences = self.http.get(f"{process.web_url}/api/v1/fences", headers=headers)
                    if fences.status_code == 200:
                        items = fence_items(fences.json()) or []
                        foreign = max(foreign, sum(1 for f in items if f["owner"] == "foreign"))
        finally:
            process.stop()
            self.stack.extra.remove(process)
        return Outcome(
            True,
            name,
            f"ran {p['seconds']}s on a new empty database; listed up to {foreign} foreign fence(s)",
        )

    def _human_uncordon(self, p: dict[str, Any]) -> Outcome:
        deadline = time.monotonic() + FENCED_WAIT
        while True:
            candidates = sorted(
                (n["metadata"]["name"] for n in self.kube.nodes() if fenced(n)),
            )
            if candidates or self.stop.is_set() or time.monotonic() > deadline:
                break
            self.stop.wait(2.0)
        if not candidates:
            return Outcome(False, note="no node was fenced")
        node = candidates[min(len(candidates) - 1, int(p["pick"] * len(candidates)))]
        self.journal.touch(node)
        self.sim.kubectl("uncordon", node)
        self.sim.kubectl("taint", "node", node, f"{QUARANTINE_TAINT}-", check=False)
        self.journal.touch(node)
        return Outcome(True, node, "kubectl uncordon; quarantine taint removed")

    def _slurmctld_clean(self, p: dict[str, Any]) -> Outcome:
        assert self.sim.slurm is not None
        conf = Path(self.sim.slurm["slurm_conf"])
        pid = int((conf.parent / "slurmctld.pid").read_text())
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + SLURMCTLD_SECONDS
        # Gone, or a zombie its parent (the simulator, or an earlier fault) has not reaped yet.
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        for old in self.stack.slurmctlds:
            if old.pid == pid:
                old.wait(timeout=10)
        log = (conf.parent / "log" / "slurmctld-clean.out").open("ab")
        ctld = subprocess.Popen(
            ["slurmctld", "-D", "-c", "-f", str(conf), "-i"],
            env=self.stack.slurm_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.stack.slurmctlds.append(ctld)
        deadline = time.monotonic() + SLURMCTLD_SECONDS
        while True:
            done = self.stack.slurm("scontrol", "ping", timeout=5)
            if done is not None and done.returncode == 0 and "UP" in done.stdout:
                break
            if time.monotonic() > deadline or ctld.poll() is not None:
                return Outcome(False, note="slurmctld did not answer after its restart with -c")
            time.sleep(0.5)
        self.journal.cleaned_slurm()
        # -c forgot every job too: give the nodes work again.
        jobs = submit_demo_jobs(self.sim.slurm, self.stack.jobs_dir, self.stack.nodes)
        return Outcome(True, "", f"slurmctld restarted with -c; {len(jobs)} jobs submitted again")

    def _pause(self, p: dict[str, Any]) -> Outcome:
        reason = {"reason": "chaos soak: pause"}
        self.console("POST", "/api/v1/controller/pause", reason, patience=COMMAND_PATIENCE)
        paused = bool(
            self.console("GET", "/api/v1/controller", patience=COMMAND_PATIENCE)["paused"]
        )
        self.stop.wait(p["seconds"])
        # Resuming is the soak's duty even when the database is down just now.
        reason = {"reason": "chaos soak: resume"}
        self.console("POST", "/api/v1/controller/resume", reason, patience=COMMAND_PATIENCE)
        return Outcome(paused, "", f"paused for {p['seconds']}s, then resumed")

    def _operator(self, p: dict[str, Any]) -> Outcome:
        deadline = time.monotonic() + FENCED_WAIT
        while True:
            waiting = self.console(
                "GET", "/api/v1/remediations?state=held&state=failed&limit=500", patience=30.0
            )
            found = sorted(waiting["items"], key=lambda r: r["id"])
            if found or self.stop.is_set() or time.monotonic() > deadline:
                break
            self.stop.wait(2.0)
        if not found:
            return Outcome(False, note="no remediation was held or failed")
        chosen = found[min(len(found) - 1, int(p["pick"] * len(found)))]
        rid = chosen["id"]
        # No cooldown: a fault still there is remediated again at once.
        body = {"reason": "chaos soak: on-call gives up on it", "cooldown": "0s"}
        try:
            self.console(
                "POST", f"/api/v1/remediations/{rid}/cancel", body, patience=COMMAND_PATIENCE
            )
        except ConsoleRefused as exc:  # 409: an earlier try that answered 5xx did it after all
            if " 409 " not in str(exc):
                raise
        detail = self.console("GET", f"/api/v1/remediations/{rid}", patience=COMMAND_PATIENCE)
        if detail["state"] != "cancelled":
            return Outcome(False, chosen["node"], f"#{rid} is {detail['state']}, not cancelled")
        failed = {
            str(e["detail"].get("replaced_again") or e["detail"].get("node") or "")
            for e in detail["events"]
            if e["action"] == "validate_failed"
        } - {""}
        present = {n["metadata"]["name"] for n in self.kube.nodes()}
        released = []
        for machine in sorted(failed & present):
            released.append(self._release(machine))
        what = f"cancelled #{rid} ({chosen['state']})"
        if released:
            what += f"; released {', '.join(released)}, which failed validation"
        return Outcome(True, chosen["node"], what)

    def _release(self, machine: str) -> str:
        """The fence owner refuses (409) while its last pass still has the cancelled
        remediation fencing the machine: asked again until the leader has acted on the cancel."""
        body = {"action": "release", "reason": "chaos soak: the vendor swapped the part"}
        deadline = time.monotonic() + FENCED_WAIT
        while True:
            try:
                self.console("POST", f"/api/v1/fences/{machine}", body, patience=COMMAND_PATIENCE)
                return machine
            except ConsoleRefused as exc:
                if " 409 " not in str(exc) or time.monotonic() > deadline:
                    return f"{machine} not ({exc})"
            self.stop.wait(2.0)

    # -- watching the controllers --------------------------------------------------------------

    def watch_replicas(self) -> None:
        """A controller that exits when nobody killed it is a finding: reported, started
        again."""
        for replica in list(self.stack.replicas.values()):
            with self.stack.lock:
                expected = replica.name in self.stack.expected_down
                process = replica.process
            if expected or process is None or process.proc.poll() is None:
                continue
            self.journal.error(
                f"controller {replica.name} exited by itself (exit {process.proc.returncode}); "
                f"the end of its log:\n{process.log_tail(15)}"
            )
            with self.stack.lock:
                self.stack.expected_down.add(replica.name)
            threading.Thread(target=self._restart, args=(replica,), daemon=True).start()

    def _restart(self, replica: Replica) -> None:
        try:
            self.stack.start_replica(replica)
        except RuntimeError as exc:
            self.journal.error(str(exc))
        finally:
            with self.stack.lock:
                self.stack.expected_down.discard(replica.name)

    def close(self) -> None:
        self.http.close()

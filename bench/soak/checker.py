"""The independent checker: about once a second it reads Kubernetes (plain HTTP with the admin
kubeconfig's token), Slurm (`sinfo --json`, `scontrol show job`), the provider (the simulated
node-pool API's operations) and the controllers' console API (remediations with their timelines,
fences, signal dispositions and the audit, with the read-only token) — never a controller's
memory or database — and asserts what docs/safety.md's invariants say that can be seen from
outside. Nodes are also watched, so that a fence taken off and put back within a second (the
controller re-asserts at once) is still seen coming off (I2).

The state names below are docs/safety.md's and docs/state-machine.md's, written out here rather
than imported, so that a change to the controller's own lists cannot quietly change the check.

Graces (stated in the report): a fence the store requires may be missing for one reconcile pass
(10 s) and a margin, 15 s, before it counts (a remediation that failed before its quarantine is
fenced by the next pass); after a human took the fence off or slurmctld forgot its drains, two
passes and a margin, 25 s (I3). Time during which the controllers could not act (a database
outage, the leader killed, a sick Kubernetes API, each plus 15 s of recovery) does not count.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from bench.soak.journal import Journal, Planted
from bench.soak.stack import (
    CLUSTER,
    MAX_CONCURRENT,
    MAX_REPLACEMENTS,
    PER_POOL,
    READER_TOKEN,
    Stack,
    fence_items,
    fenced,
    slurm_name,
)
from remediator.sim.kube.api.kobj import POOL_LABEL

# docs/safety.md: a remediation in one of these requires its node fenced.
FENCING = frozenset(
    {
        "held_by_opt_out",
        "checkpointing",
        "draining",
        "resetting_gpu",
        "rebooting",
        "diagnosing",
        "opening_rma",
        "replacing",
        "validating",
        "held",
        "failed",
    }
)
NEW_MACHINE = frozenset({"validating", "held", "failed"})  # its new machine stays fenced too
# A fence may come off once the remediation is in one of these: the transition into it is the
# recorded decision (uncordoning, verifying), it ended, or it is only queued (the queue's own
# cordon is lifted while a pause or the breaker holds it).
DECIDED = frozenset({"uncordoning", "verifying", "succeeded", "cancelled", "queued"})
NOT_ACTING = frozenset({"queued", "succeeded", "cancelled"})  # take no budget (I5)
REPLACEMENT = frozenset({"replacing", "validating", "verifying"})  # count while the node is gone
IN_FLIGHT = frozenset({"pending", "provisioning"})

ANN_REMEDIATION = "remediator.io/remediation-id"
ANN_OPERATOR = "remediator.io/operator-fence"
ANN_MACHINE = "remediator.io/machine-hold"
MARKS = (ANN_REMEDIATION, ANN_OPERATOR, ANN_MACHINE)
# Our drain reason (slurm/steps.py drain_reason): a remediation's id, or `fence` for a fence due
# to no remediation (an operator's, a machine that failed validation).
SLURM_REASON = re.compile(r"^remediator #(\d+|fence):")
RELEASE_WINDOW = 90.0  # an operator's release is carried out within this (the leader wakes)
KEY_ATTEMPT = re.compile(r"-\d+(-v\d+)?$")

POLL_SECONDS = 1.0
GRACE = 15.0
TOUCHED_GRACE = 25.0
TOUCH_WINDOW = 40.0  # a lapse this soon after a human's touch is the touch's
REMOVAL_WINDOW = 20.0  # a fence gone this soon after a human's touch (or slurmctld -c) is theirs
I6_BOUND = 90.0
I6_RECHECK = 3.0
SKEW = timedelta(seconds=10)  # signal observed_at / created_at against the planting time
JUDGE_SECONDS = 120.0  # a removal the API could not judge in this long is reported unjudged


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class Snapshot:
    """One poll's reads; None where the source did not answer."""

    at: float
    remediations: list[dict[str, Any]] | None = None
    fences: list[dict[str, Any]] | None = None
    nodes: dict[str, dict[str, Any]] | None = None
    slurm: dict[str, SlurmNode] | None = None
    operations: list[dict[str, Any]] | None = None
    # node → when an operator last released its fence (the audit's `fence_release`)
    released: dict[str, datetime] = field(default_factory=dict)

    def by_id(self) -> dict[int, dict[str, Any]]:
        return {r["id"]: r for r in self.remediations or []}


@dataclass
class Removal:
    """A fence seen gone, judged on the next poll against the API read after it."""

    node: str
    where: str  # "kubernetes" or "slurm"
    at: float
    remediation: int | None
    marks: dict[str, str] = field(default_factory=dict)


@dataclass
class SlurmNode:
    base: str
    flags: frozenset[str]
    reason: str

    @property
    def fenced(self) -> bool:
        """Nothing new can start on it: drained, down, failed (or not in a usable state)."""
        usable = self.base in ("IDLE", "ALLOCATED", "MIXED", "COMPLETING")
        return not usable or "DRAIN" in self.flags

    @property
    def ours(self) -> bool:
        return self.fenced and SLURM_REASON.match(self.reason) is not None

    @property
    def remediation(self) -> int | None:
        found = SLURM_REASON.match(self.reason)
        return int(found.group(1)) if found and found.group(1).isdigit() else None


@dataclass(frozen=True)
class Seen:
    uid: str
    fenced: bool
    marks: dict[str, str]


def seen(node: dict[str, Any]) -> Seen:
    annotations = node["metadata"].get("annotations") or {}
    marks = {
        k: v for k, v in annotations.items() if k in (ANN_REMEDIATION, ANN_OPERATOR, ANN_MACHINE)
    }
    return Seen(node["metadata"]["uid"], fenced(node), marks)


class NodeWatch:
    """Every change of every Node, from a watch (a LIST, then WATCH from its resourceVersion,
    listed again whenever the watch ends): a fence the controller puts back within a second
    would fall between two polls, so fences coming off are seen here, as they happen."""

    def __init__(self, kube: Any, journal: Journal, stop: threading.Event) -> None:
        self.journal = journal
        self.stop = stop
        self.client = kube.http(httpx.Timeout(10.0, read=30.0))
        self.state: dict[str, Seen] = {}
        self.removals: list[Removal] = []
        self.lock = threading.Lock()
        self.relists = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                version = self.relist()
                self.follow(version)
            except (httpx.HTTPError, ValueError, KeyError):
                self.stop.wait(1.0)

    def relist(self) -> str:
        response = self.client.get("/api/v1/nodes")
        response.raise_for_status()
        listed = response.json()
        self.relists += 1
        names = set()
        for node in listed["items"]:
            names.add(node["metadata"]["name"])
            self.observe(node)
        for gone in set(self.state) - names:
            del self.state[gone]
        return str(listed["metadata"]["resourceVersion"])

    def follow(self, version: str) -> None:
        params = {"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "true"}
        with self.client.stream("GET", "/api/v1/nodes", params=params) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if self.stop.is_set() or not line:
                    continue
                event = json.loads(line)
                kind, node = event["type"], event["object"]
                if kind in ("BOOKMARK",):
                    continue
                if kind == "ERROR":
                    return  # 410 Expired: list again
                if kind == "DELETED":
                    self.state.pop(node["metadata"]["name"], None)
                    continue
                self.observe(node)

    def observe(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        now, before = seen(node), self.state.get(name)
        self.state[name] = now
        if before is None or not before.fenced:
            return
        self.journal.check("I2")
        if before.uid == now.uid and not now.fenced:
            rid = before.marks.get(ANN_REMEDIATION)
            removal = Removal(
                name, "kubernetes", time.monotonic(), int(rid) if rid else None, before.marks
            )
            with self.lock:
                self.removals.append(removal)

    def take(self) -> list[Removal]:
        with self.lock:
            taken, self.removals = self.removals, []
        return taken

    def close(self) -> None:
        self.client.close()


class Checker:
    def __init__(self, stack: Stack, journal: Journal, stop: threading.Event) -> None:
        assert stack.kube is not None and stack.sim is not None
        self.stack = stack
        self.journal = journal
        self.stop = stop
        self.kube = stack.kube
        self.nodepool_url = stack.sim.nodepool_url
        self.http = httpx.Client(timeout=10.0, headers={"Authorization": f"Bearer {READER_TOKEN}"})
        self.watch = NodeWatch(stack.kube, journal, stop)
        self.details: dict[int, dict[str, Any]] = {}  # id → detail at its listed version
        self.polls = 0
        self.unanswered: Counter[str] = Counter()
        self._lapses: dict[tuple[str, str], float] = {}
        self._touches_seen: dict[str, float] = {}
        self._prev_slurm: dict[str, SlurmNode] | None = None
        self._pending: list[Removal] = []
        self._jobs_checked: set[tuple[str, str]] = set()
        self._i6_looked: dict[int, float] = {}
        self.last: Snapshot | None = None
        self.listed: list[dict[str, Any]] = []  # the remediations the API last listed
        self.operations: list[dict[str, Any]] = []  # the provider's, as last listed
        self._wall_offset = time.time() - time.monotonic()

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        threading.Thread(target=self.watch.run, name="node-watch", daemon=True).start()
        while not self.stop.is_set():
            began = time.monotonic()
            try:
                self.poll()
            except Exception as exc:  # the checker must not die quietly
                self.journal.error(f"checker poll failed: {exc!r}")
            self.stop.wait(max(0.0, POLL_SECONDS - (time.monotonic() - began)))

    def poll(self) -> None:
        snap = self.read()
        self.polls += 1
        self.judge_removals(snap)
        self.check_fences(snap)
        self.find_removals(snap)
        self.check_operations(snap)
        self.check_budgets(snap)
        self.check_dispositions(snap)
        self.check_jobs(snap)
        self.last = snap
        if snap.remediations is not None:
            self.listed = snap.remediations
        if snap.operations is not None:
            self.operations = snap.operations

    # -- reads -------------------------------------------------------------------------------

    def api(self, path: str) -> Any:
        """GET from the first console that answers (the leader's first); None if none does."""
        for url in self.stack.console_urls():
            try:
                response = self.http.get(f"{url}{path}")
            except httpx.HTTPError:
                continue
            if response.status_code == 200:
                return response.json()
        return None

    def read(self) -> Snapshot:
        """API first, then Kubernetes and Slurm: a fence the API requires is then looked for
        after it was required (I1); a fence seen gone is judged by the next poll's API, read
        after it went (I2)."""
        snap = Snapshot(at=time.monotonic())
        snap.remediations = self.read_remediations()
        snap.fences = fence_items(self.api("/api/v1/fences"))
        audit = self.api("/api/v1/audit?limit=500")
        for entry in reversed((audit or {}).get("items") or []):
            if entry["command"] == "fence_release" and entry["outcome"] == "done":
                snap.released[str(entry.get("detail") or "").removeprefix("node ")] = parse_time(
                    entry["at"]
                )
        try:
            snap.nodes = {n["metadata"]["name"]: n for n in self.kube.nodes()}
        except httpx.HTTPError:
            self.unanswered["kubernetes"] += 1
        snap.slurm = self.read_slurm()
        try:
            answer = self.http.get(f"{self.nodepool_url}/v1/operations")
            if answer.status_code == 200:
                snap.operations = answer.json()["operations"]
        except httpx.HTTPError:
            self.unanswered["provider"] += 1
        return snap

    def read_remediations(self) -> list[dict[str, Any]] | None:
        items: list[dict[str, Any]] = []
        cursor = ""
        while True:
            page = self.api(f"/api/v1/remediations?limit=500&in_flight_first=false{cursor}")
            if page is None:
                self.unanswered["api"] += 1
                return None
            items.extend(page["items"])
            if not page.get("next_cursor"):
                break
            cursor = f"&cursor={page['next_cursor']}"
        for item in items:
            known = self.details.get(item["id"])
            if known is None or known["version"] != item["version"]:
                detail = self.api(f"/api/v1/remediations/{item['id']}")
                if detail is not None:
                    self.details[item["id"]] = detail
        return items

    def read_slurm(self) -> dict[str, SlurmNode] | None:
        done = self.stack.slurm("sinfo", "--json", timeout=5.0)
        if done is None or done.returncode != 0:
            self.unanswered["slurm"] += 1
            return None
        try:
            raw = json.loads(done.stdout)["nodes"]
        except (ValueError, KeyError):
            self.unanswered["slurm"] += 1
            return None
        return {
            n["name"]: SlurmNode(
                str(n.get("state", "")).upper(),
                frozenset(str(f).upper() for f in n.get("state_flags") or []),
                n.get("reason") or "",
            )
            for n in raw
        }

    # -- I1 and I3: what the store requires is fenced ---------------------------------------

    def failed_machines(self, snap: Snapshot) -> dict[str, int]:
        """Machine → the remediation whose validation it failed (its `validate_failed` line:
        the machine replaced again, else the node checked, else the remediation's own), unless
        an operator released its fence since."""
        found: dict[str, int] = {}
        for rid, detail in self.details.items():
            for event in detail["events"]:
                if event["action"] != "validate_failed":
                    continue
                info = event.get("detail") or {}
                machine = (
                    info.get("replaced_again")
                    or info.get("node")
                    or detail.get("new_node")
                    or detail["node"]
                )
                released = snap.released.get(str(machine))
                if released is None or released < parse_time(event["at"]):
                    found[str(machine)] = rid
                else:
                    found.pop(str(machine), None)
        return found

    def subjects(self, snap: Snapshot) -> dict[str, str]:
        """Node → why it must be fenced now."""
        due: dict[str, str] = {}
        states = {rid: r["state"] for rid, r in snap.by_id().items()}
        for r in snap.remediations or []:
            if r["dry_run"]:
                continue
            if r["state"] in FENCING:
                due[r["node"]] = f"remediation #{r['id']} is {r['state']}"
            if r.get("new_node") and r["state"] in NEW_MACHINE:
                due[r["new_node"]] = f"the new machine of #{r['id']} ({r['state']})"
        for machine, rid in self.failed_machines(snap).items():
            due.setdefault(machine, f"it failed validation in #{rid}")
        for view in snap.fences or []:
            for need in view.get("needs") or []:
                rid = need.get("remediation_id")
                # The owner's last pass may be older than a decision the API already shows.
                if need["kind"] in ("remediation", "new_machine") and states.get(rid) in DECIDED:
                    continue
                if need["kind"] in ("operator", "failed_validation") and view["node"] in (
                    snap.released
                ):
                    continue
                due.setdefault(view["node"], f"the API's fences: {need['reason']}")
        return due

    def check_fences(self, snap: Snapshot) -> None:
        if snap.remediations is None or snap.nodes is None:
            return
        due = self.subjects(snap)
        seen: set[tuple[str, str]] = set()
        for node, why in sorted(due.items()):
            obj = snap.nodes.get(node)
            if obj is None:
                continue  # gone: nothing can be scheduled on it
            self.journal.check("I1")
            self.lapse(node, "kubernetes", fenced(obj), why, snap.at, seen)
            name = slurm_name(obj)
            if snap.slurm is not None and name in snap.slurm:
                self.journal.check("I1")
                self.lapse(node, "slurm", snap.slurm[name].fenced, why, snap.at, seen)
        for key in set(self._lapses) - seen:
            del self._lapses[key]
        self.note_reassertions(snap, due)

    def lapse(
        self, node: str, where: str, ok: bool, why: str, now: float, seen: set[tuple[str, str]]
    ) -> None:
        key = (node, where)
        if ok:
            return
        seen.add(key)
        since = self._lapses.setdefault(key, now)
        if where == "kubernetes":
            touched = self.journal.touched_since(node, since - TOUCH_WINDOW) is not None
        else:
            touched = self.journal.slurm_cleaned_since(since - TOUCH_WINDOW)
        grace = TOUCHED_GRACE if touched else GRACE
        waited = self.journal.effective(since, now)
        if waited <= grace:
            return
        shown = (
            "schedulable in Kubernetes (not cordoned, no remediator.io/quarantine taint)"
            if where == "kubernetes"
            else f"schedulable in Slurm ({self.slurm_state(node)})"
        )
        if touched:
            what = (
                f"{why}, yet {shown} {waited:.0f}s (controllers' time) after "
                + ("a human took its fence off" if where == "kubernetes" else "slurmctld -c")
                + f": not re-asserted within the {TOUCHED_GRACE:.0f}s grace"
            )
            self.journal.violation("I3", node, what, (where, why))
        else:
            what = f"{why}, yet {shown} for {waited:.0f}s (grace {GRACE:.0f}s)"
            self.journal.violation("I1", node, what, (where, why))

    def slurm_state(self, node: str) -> str:
        snap = self.last
        obj = (snap.nodes or {}).get(node) if snap else None
        name = slurm_name(obj) if obj else None
        found = (snap.slurm or {}).get(name or "") if snap else None
        if found is None:
            return "?"
        return "+".join([found.base, *sorted(found.flags)]) + f", reason {found.reason!r}"

    def note_reassertions(self, snap: Snapshot, due: dict[str, str]) -> None:
        """I3's figure: how long after a human's uncordon a fence still due was back. A node
        whose fence is no longer due at the first poll after the touch (its remediation ended,
        or the fence was an operator's) is counted apart: nothing is owed there."""
        assert snap.nodes is not None
        with self.journal.lock:
            touches = dict(self.journal.touched)
        for node, at in touches.items():
            if self._touches_seen.get(node) == at:
                continue
            obj = snap.nodes.get(node)
            if obj is None:  # replaced before the fence came back: nothing to schedule on
                self.journal.check("I3")
                self._touches_seen[node] = at
            elif fenced(obj) and snap.at > at + 1.0:
                self.journal.check("I3")
                self.journal.reasserted.append(round(self.journal.effective(at, snap.at), 1))
                self._touches_seen[node] = at
            elif node not in due and snap.at > at:
                self.journal.check("I3")
                self.journal.not_due += 1
                self._touches_seen[node] = at

    # -- I2: no fence comes off without a recorded decision ----------------------------------

    def find_removals(self, snap: Snapshot) -> None:
        """Fences seen coming off since the last poll (the node watch's, and Slurm's by
        comparing two polls: slurmctld puts no drain back by itself), judged on the next."""
        self._pending.extend(self.watch.take())
        if snap.slurm is not None:
            if self._prev_slurm is not None:
                for name, before_node in self._prev_slurm.items():
                    now_node = snap.slurm.get(name)
                    if not before_node.ours or now_node is None:
                        continue
                    self.journal.check("I2")
                    if not now_node.fenced:
                        self._pending.append(
                            Removal(name, "slurm", snap.at, before_node.remediation)
                        )
            self._prev_slurm = snap.slurm

    def judge_removals(self, snap: Snapshot) -> None:
        if not self._pending:
            return
        if snap.remediations is None:
            for removal in list(self._pending):
                if snap.at - removal.at > JUDGE_SECONDS:
                    self._pending.remove(removal)
                    self.journal.error(
                        f"a fence of {removal.node} ({removal.where}) came off at minute "
                        f"{self.journal.minute(removal.at):.2f} and the API never answered to "
                        "judge it"
                    )
            return
        for removal in list(self._pending):
            self._pending.remove(removal)
            verdict = self.allowed(removal, snap)
            if verdict is not None:
                where = "its Kubernetes fence" if removal.where == "kubernetes" else "its drain"
                self.journal.violation(
                    "I2",
                    removal.node,
                    f"{where} came off with no recorded decision: {verdict}",
                    (removal.where, str(removal.remediation), f"{removal.at:.0f}"),
                )

    def allowed(self, removal: Removal, snap: Snapshot) -> str | None:
        """None when a decision (or the soak's own human) explains the removal; else why not."""
        since = removal.at - REMOVAL_WINDOW
        if removal.where == "kubernetes" and self.journal.touched_since(removal.node, since):
            return None
        if removal.where == "slurm" and self.journal.slurm_cleaned_since(since):
            return None
        node = removal.node
        if removal.where == "slurm":  # the Kubernetes node that carries this Slurm name now
            hosts = [n for n, o in (snap.nodes or {}).items() if slurm_name(o) == removal.node]
            node = hosts[0] if hosts else ""
        released = snap.released.get(node)
        if released is not None and (
            removal.at - RELEASE_WINDOW <= released.timestamp() - self._wall_offset <= removal.at
        ):
            return None  # an operator released it (only the soak's on-call does, with a reason)
        if removal.remediation is not None:
            found = snap.by_id().get(removal.remediation)
            if found is None:
                return f"its mark names remediation #{removal.remediation}, which the API lacks"
            if found["state"] in DECIDED:
                return None
            return f"remediation #{found['id']} is still {found['state']}"
        if removal.marks:
            return f"marked {removal.marks} and no operator released it"
        about = [
            r for r in snap.remediations or [] if removal.node in (r["node"], r.get("new_node"))
        ]
        if about and max(about, key=lambda r: r["id"])["state"] in DECIDED:
            return None
        latest = max(about, key=lambda r: r["id"]) if about else None
        return (
            f"its latest remediation #{latest['id']} is {latest['state']}"
            if latest
            else "no remediation of the API names the node"
        )

    # -- I4 and I8: provider operations per remediation ------------------------------------

    def groups(self, operations: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
        """Replacement operations by the remediation's key (the Idempotency-Key less its
        attempt suffix, remediation/steps/context.py replacement_key)."""
        grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for op in operations:
            if op.get("action"):
                continue  # a whole rack's operation: none in this fleet
            grouped[KEY_ATTEMPT.sub("", op["idempotency_key"])].append(op)
        return grouped

    def owner(self, ops: Iterable[dict[str, Any]]) -> str:
        ids = {op["id"] for op in ops}
        nodes = {op["node"] for op in ops}
        for rid, detail in self.details.items():
            named = {(e.get("detail") or {}).get("operation_id") for e in detail["events"]} | {
                detail.get("replacement_operation_id")
            }
            if named & ids or detail["node"] in nodes:
                return f"#{rid} ({detail['policy']})"
        return "an unknown remediation"

    def check_operations(self, snap: Snapshot) -> None:
        for key, ops in self.groups(snap.operations or []).items():
            self.journal.check("I4")
            self.journal.check("I8")
            node = ops[0]["node"]
            if len(ops) > MAX_REPLACEMENTS + 1:
                self.journal.violation(
                    "I4",
                    node,
                    f"{len(ops)} replacement operations for {self.owner(ops)}, more than "
                    f"max_replacements + 1 = {MAX_REPLACEMENTS + 1}: "
                    + ", ".join(f"{o['id']} {o['node']} {o['state']}" for o in ops),
                    (key, "count"),
                )
            flying = [op for op in ops if op["state"] in IN_FLIGHT]
            if len(flying) > 1:
                self.journal.violation(
                    "I4",
                    node,
                    f"{len(flying)} replacement operations in flight at once for "
                    f"{self.owner(ops)}: " + ", ".join(o["id"] for o in flying),
                    (key, "flying"),
                )
            twice = [n for n, c in Counter(
                op["node"] for op in ops if op["state"] != "failed"
            ).items() if c > 1]  # fmt: skip
            for again in twice:
                self.journal.violation(
                    "I8",
                    again,
                    f"replaced twice by {self.owner(ops)}: "
                    + ", ".join(o["id"] for o in ops if o["node"] == again),
                    (key, "twice"),
                )

    def check_overlaps(self) -> None:
        """At the end: from the operations' own times, two of one remediation never overlapped
        (catches what fell between two polls)."""
        end = datetime.now(UTC)
        for key, ops in self.groups(self.operations).items():
            spans = sorted(
                (
                    parse_time(op["created_at"]),
                    end if op["state"] in IN_FLIGHT else parse_time(op["updated_at"]),
                    op["id"],
                )
                for op in ops
            )
            for (_, first_end, first), (second_start, _, second) in itertools.pairwise(spans):
                self.journal.check("I4")
                if second_start < first_end:
                    self.journal.violation(
                        "I4",
                        ops[0]["node"],
                        f"operations {first} and {second} of {self.owner(ops)} overlapped",
                        (key, "overlap"),
                    )

    # -- I5: budgets -------------------------------------------------------------------------

    def check_budgets(self, snap: Snapshot) -> None:
        """What the admission counts (remediation/intake.py cluster_state) of the remediations
        the API lists: each open or failed one that is not queued takes its node out of service
        while the node is there, or while its replacement is in flight."""
        if snap.remediations is None or snap.nodes is None:
            return
        pools: dict[str, set[str]] = defaultdict(set)
        running = 0
        for r in snap.remediations:
            if r["dry_run"] or r["state"] in NOT_ACTING:
                continue
            if r["node"] not in snap.nodes and r["state"] not in REPLACEMENT:
                continue
            pool = r.get("pool") or (
                (snap.nodes.get(r["node"]) or {}).get("metadata", {}).get("labels", {})
            ).get(POOL_LABEL, "")
            pools[pool].add(r["node"])
            if r["state"] != "held_by_opt_out":
                running += 1
        self.journal.check("I5", len(pools) + 2)
        for pool, nodes in pools.items():
            if len(nodes) > PER_POOL:
                self.journal.violation(
                    "I5",
                    ",".join(sorted(nodes)),
                    f"{len(nodes)} nodes of pool {pool} out of service at once "
                    f"(max_unhealthy.per_pool {PER_POOL})",
                    (pool, ",".join(sorted(nodes))),
                )
        everywhere = set().union(*pools.values()) if pools else set()
        if len(everywhere) > CLUSTER:
            self.journal.violation(
                "I5",
                ",".join(sorted(everywhere)),
                f"{len(everywhere)} nodes out of service at once (max_unhealthy.cluster {CLUSTER})",
                ("cluster", ",".join(sorted(everywhere))),
            )
        if running > MAX_CONCURRENT:
            self.journal.violation(
                "I5",
                "-",
                f"{running} remediations running at once (max_concurrent {MAX_CONCURRENT})",
                ("concurrent", str(running)),
            )

    # -- I6: every planted signal has a disposition ------------------------------------------

    def check_dispositions(self, snap: Snapshot) -> None:
        with self.journal.lock:
            open_ = [p for p in self.journal.planted if p.resolved is None]
        for planted in open_:
            if snap.remediations is not None:
                self.resolve(planted, snap)
            if planted.resolved is not None:
                self.journal.check("I6")
                continue
            waited = self.journal.effective(planted.at, snap.at)
            if waited > I6_BOUND:
                self.journal.check("I6")
                self.journal.violation(
                    "I6",
                    planted.node,
                    f"{planted.what} planted at minute {self.journal.minute(planted.at):.2f} has "
                    f"no disposition in the API after {waited:.0f}s (bound {I6_BOUND:.0f}s)",
                    (f"{planted.at:.1f}",),
                )
                planted.resolved = "none (violation)"

    def resolve(self, planted: Planted, snap: Snapshot) -> None:
        since = planted.wall - SKEW
        for r in snap.remediations or []:
            if r["node"] == planted.node and parse_time(r["created_at"]) >= since:
                planted.resolved = f"opened #{r['id']}"
                planted.latency = self.journal.effective(planted.at, snap.at)
                return
        key = id(planted)
        if snap.at - self._i6_looked.get(key, 0.0) < I6_RECHECK:
            return
        self._i6_looked[key] = snap.at
        stamp = since.isoformat().replace("+00:00", "Z")
        page = self.api(f"/api/v1/signals?node={planted.node}&from={stamp}&limit=50")
        for item in (page or {}).get("items") or []:
            observed = parse_time(item["signal"]["observed_at"])
            if item.get("disposition") and observed >= since:
                planted.resolved = str(item["disposition"])
                planted.latency = self.journal.effective(planted.at, snap.at)
                return

    # -- I7 and I8: Slurm jobs ---------------------------------------------------------------

    def check_jobs(self, snap: Snapshot) -> None:
        with self.journal.lock:
            cleaned = [at + self._wall_offset for at in self.journal.slurm_cleaned]
        for rid, detail in list(self.details.items()):
            created = parse_time(detail["created_at"]).timestamp()
            for job in detail.get("slurm_jobs") or []:
                key = (str(rid), str(job["job"]))
                requeues = sum(1 for c in job["commands"] if c == f"scontrol requeue {job['job']}")
                if requeues > 1 and key not in self._jobs_checked:
                    self.journal.violation(
                        "I8",
                        job["slurm_node"],
                        f"remediation #{rid} requeued job {job['job']} {requeues} times",
                        ("requeue", *key),
                    )
                if not job.get("fate") or key in self._jobs_checked:
                    continue
                self._jobs_checked.add(key)
                if any(at >= created for at in cleaned):
                    continue  # slurmctld -c forgot the job (and reuses its id)
                self.check_fate(rid, job)

    def check_fate(self, rid: int, job: dict[str, Any]) -> None:
        done = self.stack.slurm("scontrol", "show", "job", str(job["job"]), "-o", timeout=8.0)
        if done is None:
            return  # slurmctld did not answer: unverifiable now
        fields = dict(
            part.split("=", 1) for part in (done.stdout.splitlines() or [""])[0].split()
            if "=" in part
        )  # fmt: skip
        state, restarts = fields.get("JobState", ""), int(fields.get("Restarts", "0") or 0)
        fate = str(job["fate"])
        self.journal.check("I7")
        if done.returncode != 0 or not state:
            wrong = f"Slurm does not know it ({done.stderr.strip() or done.stdout.strip()})"
        elif fate.startswith("requeued"):
            wrong = "" if restarts >= 1 else f"Slurm shows {state} with Restarts={restarts}"
        elif fate.startswith("cancelled"):
            wrong = "" if state.startswith("CANCELLED") else f"Slurm shows {state}"
        elif fate.startswith("ended "):
            ended = fate.split()[1]
            wrong = "" if state.startswith(ended) else f"Slurm shows {state}"
        elif fate.startswith("left running"):
            wrong = "" if state in ("RUNNING", "COMPLETING") else f"Slurm shows {state}"
        else:
            wrong = ""
        if wrong:
            self.journal.violation(
                "I7",
                job["slurm_node"],
                f"remediation #{rid} recorded job {job['job']} as {fate!r}, but {wrong}",
                ("fate", str(rid), str(job["job"])),
            )

    def close(self) -> None:
        self.http.close()
        self.watch.close()

"""Burn-in verdicts: each validation check's programs' output → pass or fail with the evidence.
Pure functions over the parsed reports and the policy's settings; output that does not parse
fails its check with the raw tail, never passes it. The Jobs that produce the output are run
by the validate step (remediation/steps/validate.py) through actions/jobs.py."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from remediator.actions.dcgm import DiagUnreadable, parse_diag
from remediator.actions.inventory import (
    BASELINE_KEYS,
    Baseline,
    Inventory,
    InventoryUnreadable,
    parse_ibstat,
    parse_query_gpu,
    parse_smi_header,
    query_gpu_command,
)
from remediator.actions.jobs import tail
from remediator.actions.nccl import RANK, NcclFailed, NcclUnreadable, parse_all_reduce
from remediator.kube.objects import Node
from remediator.model.gpus import floor_for, labelled_versions

INVENTORY = "inventory"
DCGM = "dcgm"
NCCL = "nccl"
NCCL_PAIR = "nccl_pair"
CHECK_ORDER = (INVENTORY, DCGM, NCCL, NCCL_PAIR)
# A node that is fenced by us or still carries a not-ready/unreachable/startup taint is no
# healthy peer.
FENCE_PREFIXES = ("remediator.io/", "node.kubernetes.io/")
# A pool's value binds a node only when at least this many in-service nodes show it.
MIN_MAJORITY = 2


@dataclass(frozen=True)
class Verdict:
    check: str
    passed: bool
    reason: str
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "passed": self.passed, "reason": self.reason, **self.evidence}


@dataclass(frozen=True)
class Checks:
    """A validate step's settings, as stored in the ladder (`LadderStep.checks`)."""

    dcgm_level: int = 2
    dcgm_level_new: int = 3
    nccl: bool = True
    busbw_floor: Mapping[str, float] = field(default_factory=dict)
    inventory: bool = True
    pins: Mapping[str, Any] = field(default_factory=dict)
    max_replacements: int = 2
    # The two-node all-reduce with a healthy peer of the pool (off by default), and its floors.
    nccl_pair: bool = False
    pair_busbw_floor: Mapping[str, float] = field(default_factory=dict)
    # The settings' startup taint (kubelet syntax): only a passed validation removes it.
    startup_taint: str | None = None

    @classmethod
    def from_json(cls, raw: Mapping[str, Any] | None) -> Checks:
        raw = raw or {}
        return cls(
            dcgm_level=int(raw.get("dcgm_level", 2)),
            dcgm_level_new=int(raw.get("dcgm_level_new", 3)),
            nccl=bool(raw.get("nccl", True)),
            busbw_floor={str(k): float(v) for k, v in (raw.get("busbw_floor") or {}).items()},
            inventory=bool(raw.get("inventory", True)),
            pins=dict(raw.get("pins") or {}),
            max_replacements=int(raw.get("max_replacements", 2)),
            nccl_pair=bool(raw.get("nccl_pair", False)),
            pair_busbw_floor={
                str(k): float(v) for k, v in (raw.get("pair_busbw_floor") or {}).items()
            },
            startup_taint=str(raw["startup_taint"]) if raw.get("startup_taint") else None,
        )

    def enabled(self) -> tuple[str, ...]:
        wanted = {
            INVENTORY: self.inventory,
            DCGM: True,
            NCCL: self.nccl,
            NCCL_PAIR: self.nccl_pair,
        }
        return tuple(c for c in CHECK_ORDER if wanted[c])


def programs(
    check: str, *, dcgm_level: int, gpus: int, node: str = "", peer: str | None = None
) -> dict[str, list[str]]:
    """The programs of one check: program name → its argv. The two-node all-reduce is one
    MPI rank per GPU on both nodes, launched from the node under test (`-g 1`: nccl-tests'
    multi-node form); without a peer it has no program."""
    if check == INVENTORY:
        return {"gpus": query_gpu_command(), "smi": ["nvidia-smi"], "ib": ["ibstat"]}
    if check == DCGM:
        return {"diag": ["dcgmi", "diag", "-r", str(dcgm_level), "-j"]}
    if check == NCCL:
        return {"allreduce": ["all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", str(gpus)]}
    if check == NCCL_PAIR:
        if peer is None:
            return {}
        hosts = f"{node}:{gpus},{peer}:{gpus}"
        return {
            "allreduce": [
                *("mpirun", "--allow-run-as-root", "-np", str(2 * gpus), "-H", hosts),
                *("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "1"),
            ]
        }
    raise ValueError(f"unknown validation check {check!r}")


def choose_peer(
    node: str, pool_nodes: Iterable[Node], validated: Iterable[str], busy: Iterable[str]
) -> str | None:
    """The two-node test's peer: a node of the same pool that passed a validation, is Ready and
    schedulable with no fence or startup taint, and is under no remediation; the first by name,
    so a resumed step picks the same one."""
    passed, taken = set(validated), set(busy)
    healthy = sorted(
        n.name
        for n in pool_nodes
        if n.name != node
        and n.name in passed
        and n.name not in taken
        and n.ready
        and not n.unschedulable
        and not any(t.key.startswith(FENCE_PREFIXES) for t in n.taints)
    )
    return healthy[0] if healthy else None


def no_peer_verdict(pool: str | None) -> Verdict:
    """Skipped, and says so: the step is not failed for want of a peer, nor is this a pass."""
    return Verdict(
        NCCL_PAIR,
        False,
        f"nccl_pair skipped: no validated, schedulable node of pool {pool or '(none)'} "
        "outside a remediation to pair with",
        {"skipped": True, "peer": None},
    )


def _unreadable(check: str, program: str, error: Exception, output: str) -> Verdict:
    return Verdict(
        check,
        False,
        f"{check}: {program} output unreadable: {error}",
        {"program": program, "raw_tail": tail(output, 1000)},
    )


def read_inventory(outputs: Mapping[str, str]) -> Inventory | Verdict:
    """The inventory from its three programs' output, or the failing verdict that says which
    one did not parse."""
    try:
        gpus = parse_query_gpu(outputs.get("gpus", ""))
    except InventoryUnreadable as exc:
        return _unreadable(INVENTORY, "nvidia-smi --query-gpu", exc, outputs.get("gpus", ""))
    try:
        _, cuda = parse_smi_header(outputs.get("smi", ""))
    except InventoryUnreadable as exc:
        return _unreadable(INVENTORY, "nvidia-smi", exc, outputs.get("smi", ""))
    try:
        ports = parse_ibstat(outputs.get("ib", ""))
    except InventoryUnreadable as exc:
        return _unreadable(INVENTORY, "ibstat", exc, outputs.get("ib", ""))
    return Inventory(gpus, cuda, ports)


def in_service(node: Node, busy: AbstractSet[str], startup_taint_key: str | None) -> bool:
    """Serving work now: Ready, schedulable, without a fence, a lifecycle taint or the startup
    taint, and under no remediation. Only such nodes speak for what the pool runs."""
    return (
        node.ready
        and not node.unschedulable
        and node.name not in busy
        and not any(
            t.key.startswith(FENCE_PREFIXES) or t.key == startup_taint_key for t in node.taints
        )
    )


def pool_readings(
    under_test: str,
    pool_nodes: Iterable[Node],
    validated: Mapping[str, Mapping[str, Any]],
    busy: Iterable[str],
    startup_taint_key: str | None = None,
) -> dict[str, dict[str, Any]]:
    """What each in-service node of the pool (the node under test left out) runs now: GPU
    feature discovery's labels, which follow a driver change, over the inventory of its last
    passed validation. A node that shows neither says nothing."""
    taken = set(busy) | {under_test}
    readings: dict[str, dict[str, Any]] = {}
    for node in pool_nodes:
        if not in_service(node, taken, startup_taint_key):
            continue
        seen = {k: v for k, v in (validated.get(node.name) or {}).items() if k in BASELINE_KEYS}
        seen.update(labelled_versions(node.labels))
        if seen:
            readings[node.name] = seen
    return readings


def _comparable(value: Any) -> Any:
    return value if isinstance(value, int) and not isinstance(value, bool) else str(value)


def baseline_of(
    readings: Mapping[str, Mapping[str, Any]], pins: Mapping[str, Any]
) -> Baseline | None:
    """What a node of the pool should show: each pinned value, else what a strict majority of
    at least two of the pool's in-service nodes show (`readings`, node → values). A value only
    one machine shows (a pool of one, or the pool's first validated node) or that has no
    majority is reported, not enforced: one machine on a wrong driver must not fail every
    healthy node after it. None when there is nothing to enforce or report."""
    values: dict[str, Any] = {}
    disagreeing: list[str] = []
    unenforced: dict[str, dict[str, Any]] = {}
    off: dict[str, dict[str, Any]] = {}
    for key in BASELINE_KEYS:
        if key in pins:
            values[key] = pins[key]
            continue
        holders: dict[Any, list[str]] = {}
        for node, seen in sorted(readings.items()):
            if seen.get(key) is not None:
                holders.setdefault(_comparable(seen[key]), []).append(node)
        if not holders:
            continue
        value, nodes = max(holders.items(), key=lambda item: len(item[1]))
        total = sum(len(n) for n in holders.values())
        if len(nodes) * 2 > total and len(nodes) >= MIN_MAJORITY:
            values[key] = value
            for other, names in holders.items():
                if other != value:
                    for name in names:
                        off.setdefault(name, {})[key] = other
            continue
        if len(nodes) * 2 <= total:
            disagreeing.append(key)
        unenforced[key] = {str(v): n for v, n in holders.items()}
    if not values and not unenforced:
        return None
    counted = f"{len(readings)} in-service node(s)"
    source = f"majority of {counted}" if readings else "pinned in the policy"
    if pins and readings:
        source = f"pins, else the majority of {counted}"
    return Baseline(values, source, len(readings), tuple(disagreeing), unenforced, off)


def baseline_notes(baseline: Baseline | None, summary: Mapping[str, Any]) -> list[str]:
    """The timeline's account, for a human and never a reason to fail the node under test: the
    values the baseline left unenforced where the node differs from some in-service node, and
    the in-service nodes that differ from the baseline."""
    if baseline is None:
        return []
    notes = []
    for key, holders in baseline.unenforced.items():
        if set(holders) == {str(summary.get(key))}:
            continue  # the node agrees with every node that shows the value
        shown = ", ".join(f"{v} on {', '.join(n)}" for v, n in holders.items())
        why = "no majority" if key in baseline.disagreeing else "a single machine's"
        notes.append(f"{key} not enforced ({why}: {shown})")
    if baseline.off_baseline:
        named = ", ".join(
            f"{node} ({', '.join(f'{k} {v}' for k, v in values.items())})"
            for node, values in sorted(baseline.off_baseline.items())
        )
        notes.append(f"off the pool's baseline: {named}")
    return notes


def _off_rate(inventory: Inventory, baseline: Baseline | None) -> tuple[list[str], list[Any]]:
    """Each Active InfiniBand port not at the expected rate, named with both rates: the pool's
    baseline rate when it has one, else the node's fastest port (a slower one fails even on
    the pool's first node)."""
    pool_rate = baseline.values.get("ib_rate") if baseline is not None else None
    expected = int(pool_rate) if pool_rate is not None else None
    against = "the pool's baseline" if expected is not None else "the node's other ports"
    off = inventory.off_rate_ports(expected)
    want = expected if expected is not None else inventory.ib_rate
    named = [
        f"IB {p.ca} port {p.port} is Active at "
        + (f"{p.rate} Gb/s" if p.rate is not None else "an unreadable rate")
        + f", expected {want} Gb/s ({against})"
        for p in off
    ]
    evidence = [
        {"ca": p.ca, "port": p.port, "rate": p.rate, "expected": want, "against": against}
        for p in off
    ]
    return named, evidence


def inventory_verdict(inventory: Inventory, baseline: Baseline | None) -> Verdict:
    summary = inventory.summary
    evidence: dict[str, Any] = {"inventory": summary, "gpus": inventory.identity()}
    problems = [
        f"IB {p.ca} port {p.port} is {p.state}" for p in inventory.infiniband if p.state != "Active"
    ]
    off_rate, off_evidence = _off_rate(inventory, baseline)
    if off_rate:
        problems += off_rate
        evidence["ib_off_rate"] = off_evidence
    expected = dict(baseline.values) if baseline is not None else {}
    evidence["baseline"] = expected or None
    if baseline is not None:
        evidence["baseline_source"] = baseline.source
        evidence["baseline_unenforced"] = {k: dict(v) for k, v in baseline.unenforced.items()}
        evidence["off_baseline"] = {k: dict(v) for k, v in baseline.off_baseline.items()}
    for key, want in expected.items():
        have = summary.get(key)
        if key == "ib_rate" and off_rate:
            continue  # named port by port above
        if str(have) != str(want):
            problems.append(f"{key} is {have}, the pool's baseline {want}")
    if problems:
        return Verdict(INVENTORY, False, "inventory: " + "; ".join(problems), evidence)
    notes = "".join(f"; {note}" for note in baseline_notes(baseline, summary))
    if not expected:
        return Verdict(
            INVENTORY,
            True,
            "inventory: the pool has no baseline yet and the policy pins nothing: "
            f"recorded as found ({summary['gpu_count']} x {summary['gpu_model']}, driver "
            f"{summary['driver']}, CUDA {summary['cuda']})" + notes,
            evidence,
        )
    assert baseline is not None
    return Verdict(
        INVENTORY,
        True,
        f"inventory matches the pool's baseline ({baseline.source})" + notes,
        evidence,
    )


def dcgm_verdict(output: str, level: int, exit_code: int | None) -> Verdict:
    try:
        report = parse_diag(output)
    except DiagUnreadable as exc:
        return _unreadable(DCGM, "dcgmi diag", exc, output)
    evidence: dict[str, Any] = {"level": level, "results": len(report.verdicts)}
    failures = report.failures
    if failures:
        named = sorted(
            {v.test + (f" on GPU {v.gpu}" if v.gpu is not None else "") for v in failures}
        )
        evidence["failed"] = [v.to_json() for v in failures]
        return Verdict(DCGM, False, f"DCGM level {level}: {'; '.join(named)}", evidence)
    if exit_code not in (None, 0):
        evidence["exit_code"] = exit_code
        return Verdict(
            DCGM, False, f"dcgmi exited {exit_code} without naming a failing test", evidence
        )
    return Verdict(
        DCGM, True, f"DCGM level {level} passed ({len(report.verdicts)} results)", evidence
    )


def nccl_pair_verdict(
    output: str, model: str | None, floors: Mapping[str, float], node: str, peer: str
) -> Verdict:
    """The two-node all-reduce: as the one-node one, against the pair floor, and only when its
    ranks really ran on both nodes."""
    hosts = sorted({m.group(1) for m in map(RANK.match, output.splitlines()) if m})
    verdict = nccl_verdict(output, model, floors, NCCL_PAIR)
    evidence = {**verdict.evidence, "peer": peer, "hosts": hosts}
    if verdict.passed and hosts != sorted({node, peer}):
        return Verdict(
            NCCL_PAIR,
            False,
            f"nccl_pair: the all-reduce ran on {', '.join(hosts) or 'no host'}, "
            f"not on {node} and {peer}",
            evidence,
        )
    reason = verdict.reason.replace("all_reduce_perf:", f"all_reduce_perf with {peer}:", 1)
    return Verdict(NCCL_PAIR, verdict.passed, reason, evidence)


def nccl_verdict(
    output: str, model: str | None, floors: Mapping[str, float], check: str = NCCL
) -> Verdict:
    try:
        report = parse_all_reduce(output)
    except NcclFailed as exc:
        return Verdict(
            check,
            False,
            f"{check}: all_reduce_perf failed: {exc.line}",
            {"program": "all_reduce_perf", "failure": exc.line, "raw_tail": tail(output, 1000)},
        )
    except NcclUnreadable as exc:
        return _unreadable(check, "all_reduce_perf", exc, output)
    evidence: dict[str, Any] = {**report.to_json(), "gpu_model": model}
    if report.wrong:
        return Verdict(
            check, False, f"all_reduce_perf: {report.wrong} wrong value(s) in the results", evidence
        )
    floor = floor_for(floors, model)
    evidence["floor_gbps"] = floor
    busbw = report.peak.busbw
    if floor is None:
        # A gap in the policy says nothing about the machine: failing it would replace healthy
        # hardware, and its replacement would fail the same way.
        field_name = "pair_busbw_floor" if check == NCCL_PAIR else "busbw_floor"
        return Verdict(
            check,
            False,
            f"{check} skipped: no {field_name} is configured for GPU model {model!r} in this "
            f"validate step, so the measured {busbw:g} GB/s was not judged; add the model's "
            "floor to the policy",
            {**evidence, "skipped": True, "warning": True},
        )
    if busbw < floor:
        return Verdict(
            check,
            False,
            f"all_reduce_perf: bus bandwidth {busbw:g} GB/s at {report.peak.size} B is under the "
            f"{model} floor of {floor:g} GB/s",
            evidence,
        )
    return Verdict(
        check, True, f"all_reduce_perf: bus bandwidth {busbw:g} GB/s ≥ floor {floor:g}", evidence
    )

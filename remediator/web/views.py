"""Pure helpers that turn store records into what a page shows: durations, the timeline with the
time spent in each step, the pods a drain touched, runbook links, repeat offenders.

Nothing here reads the clock or the database; `now` is always passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from itertools import pairwise
from typing import Any

import yaml

from remediator.model import disruption
from remediator.model.states import CANCELLABLE, OPEN, WAITING_FOR_HUMAN, State
from remediator.policy.ladder import parse_ladder
from remediator.policy.loader import PolicySet
from remediator.remediation.commands import entered_from
from remediator.remediation.planner import STEP_NAMES, STEP_STATES, next_work_state
from remediator.signals import xid
from remediator.signals.model import Signal, SignalKind
from remediator.store.records import EventRecord, QuarantineSpan, RemediationRecord

# NVSentinel's line: five remediations of one node within a week means hardware, not bad luck.
DEFAULT_REPEAT = (5, timedelta(days=7))

STATE_TONE: Mapping[State, str] = {
    State.QUEUED: "wait",
    State.DETECTED: "work",
    State.QUARANTINED: "work",
    State.CHECKPOINTING: "work",
    State.DRAINING: "work",
    State.RESETTING_GPU: "work",
    State.REBOOTING: "work",
    State.DIAGNOSING: "work",
    State.UNCORDONING: "work",
    State.REPLACING: "work",
    State.VERIFYING: "work",
    State.AWAITING_APPROVAL: "wait",
    State.HELD_BY_OPT_OUT: "wait",
    State.HELD: "wait",
    State.FAILED: "bad",
    State.SUCCEEDED: "good",
    State.CANCELLED: "off",
}

_XID_RUNBOOKS: Mapping[int, str] = {
    79: "xid-79",
    **dict.fromkeys((48, 63, 64, 94, 95, 140), "xid-48-94-95-row-remap"),
    **dict.fromkeys((13, 31, 43), "xid-13-31-43"),
    **dict.fromkeys((74, *range(144, 151)), "nvlink"),
    92: "ecc",
}
_KIND_RUNBOOKS: Mapping[SignalKind, str] = {
    SignalKind.THERMAL: "thermal",
    SignalKind.NVLINK: "nvlink",
    SignalKind.INFINIBAND: "infiniband",
    SignalKind.ECC: "ecc",
    SignalKind.ROW_REMAP: "xid-48-94-95-row-remap",
    SignalKind.GPU_MISSING: "gpu-missing",
    SignalKind.NODE_CONDITION: "node-condition",
    SignalKind.SLURM_NODE: "slurm-node",
    SignalKind.SXID: "nvswitch-sxid",
    SignalKind.FABRIC_MANAGER: "nvswitch-sxid",
}


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1:
        return "<1s"
    whole = int(seconds)
    days, rest = divmod(whole, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    # Two units at most, and no trailing zero ("7d", not "7d 0h").
    for big, big_unit, small, small_unit in (
        (days, "d", hours, "h"),
        (hours, "h", minutes, "m"),
        (minutes, "m", secs, "s"),
    ):
        if big:
            return f"{big}{big_unit} {small}{small_unit}" if small else f"{big}{big_unit}"
    return f"{secs}s"


def relative(at: datetime | None, now: datetime) -> str:
    if at is None:
        return ""
    delta = (now - at).total_seconds()
    if abs(delta) < 5:
        return "just now"
    text = format_duration(abs(delta))
    return f"{text} ago" if delta > 0 else f"in {text}"


def absolute(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%d %H:%M:%S UTC") if at else ""


def elapsed(record: RemediationRecord, now: datetime) -> float:
    """Detection to the end, or to now while it is still open."""
    end = record.finished_at or now
    return max(0.0, (end - record.created_at).total_seconds())


@dataclass(frozen=True)
class TimelineRow:
    event: EventRecord
    seconds: float | None  # time spent in the state this transition entered
    ongoing: bool


def timeline(record: RemediationRecord, now: datetime) -> list[TimelineRow]:
    """Each event with, for transitions, how long the state it entered lasted (so far, if it is
    the current one and the remediation is not finished)."""
    moves = [e for e in record.events if e.to_state is not None]
    left: dict[int, datetime] = {a.id: b.at for a, b in pairwise(moves)}
    rows: list[TimelineRow] = []
    for event in record.events:
        if event.to_state is None:
            rows.append(TimelineRow(event, None, False))
        elif event.id in left:
            rows.append(TimelineRow(event, (left[event.id] - event.at).total_seconds(), False))
        elif event.to_state in (State.SUCCEEDED, State.CANCELLED) or record.finished_at:
            rows.append(TimelineRow(event, None, False))
        else:
            rows.append(TimelineRow(event, max(0.0, (now - event.at).total_seconds()), True))
    return rows


def _facts(detail: Mapping[str, Any]) -> Mapping[str, Any]:
    nested = detail.get("facts")
    return nested if isinstance(nested, Mapping) else detail


@dataclass
class PodRow:
    pod: str
    checkpoint: str = "not asked"
    drain: str = ""
    sigterm_at: str = ""
    grace_seconds: Any = None
    note: str = ""


def pods(events: Iterable[EventRecord]) -> list[PodRow]:
    """What happened to each workload, from the checkpoint and drain facts on the timeline; the
    newest report about a pod wins."""
    rows: dict[str, PodRow] = {}

    def row(key: str) -> PodRow:
        return rows.setdefault(key, PodRow(key))

    for event in events:
        facts = _facts(event.detail)
        for key in _strings(facts.get("asked")):
            row(key).checkpoint = "asked"
        for key in _strings(facts.get("pending")):
            row(key).checkpoint = "did not answer"
        for key in _strings(facts.get("answered")):
            row(key).checkpoint = "checkpointed"
        for entry in facts.get("pods") or ():
            if not isinstance(entry, Mapping) or not isinstance(entry.get("pod"), str):
                continue
            current = row(entry["pod"])
            current.drain = str(entry.get("state", current.drain))
            current.sigterm_at = str(entry.get("sigterm_at") or current.sigterm_at)
            current.grace_seconds = entry.get("grace_seconds", current.grace_seconds)
            note = entry.get("message") or entry.get("reason")
            current.note = str(note) if note else current.note
    return sorted(rows.values(), key=lambda r: r.pod)


@dataclass
class SlurmJobRow:
    job: str  # as Slurm addresses it: `12`, `8_3` (array task), `20+1` (heterogeneous component)
    slurm_node: str
    commands: list[str] = field(default_factory=list)
    fate: str | None = None  # requeued, ended with its exit state, cancelled, left running


def slurm_jobs(events: Iterable[EventRecord]) -> list[SlurmJobRow]:
    """Each Slurm job the remediation touched: what was decided and sent for it, and what became
    of it (from its `slurm` timeline lines)."""
    rows: dict[str, SlurmJobRow] = {}
    for event in events:
        job = event.detail.get("job")
        if event.action != "slurm" or not isinstance(job, int | str) or isinstance(job, bool):
            continue
        key = str(job)
        row = rows.setdefault(key, SlurmJobRow(key, str(event.detail.get("slurm_node", ""))))
        if event.detail.get("fate"):
            row.fate = str(event.detail["fate"])
        elif event.detail.get("note"):
            row.commands.append(str(event.detail["note"]))
        else:
            row.commands.append(f"{event.detail.get('command')} → {event.detail.get('answer')}")
    return sorted(rows.values(), key=lambda r: r.job)


def _strings(value: object) -> list[str]:
    if not isinstance(value, list | tuple):
        return []
    return [v for v in value if isinstance(v, str)]


def signal_runbook(signal: Signal) -> str | None:
    if signal.kind is SignalKind.XID:
        return _XID_RUNBOOKS.get(signal.code) if signal.code is not None else None
    return _KIND_RUNBOOKS.get(signal.kind)


def record_runbook(record: RemediationRecord) -> str | None:
    """The page for the situation the remediation is in, else for the signal that started it."""
    if record.state is State.HELD_BY_OPT_OUT:
        return "held-by-opt-out"
    if record.state is State.HELD:
        if capacity_hold(record):
            return "no-spare-capacity"
        held_in = entered_from(record, State.HELD)
        return "drain-stuck-pdb" if held_in is State.DRAINING else "remediation-stuck"
    if record.state is State.FAILED:
        step = entered_from(record, State.FAILED)
        if step in (State.REPLACING, State.VERIFYING):
            return "replacement-failed"
        if step is State.DIAGNOSING:
            return "diagnostics-failed"
        if step is State.REBOOTING:
            return "reboot-loop"
        return "remediation-stuck"
    if record.signals:
        return signal_runbook(record.signals[0])
    if record.signal_kind == SignalKind.XID.value and record.xid_code is not None:
        return _XID_RUNBOOKS.get(record.xid_code)
    try:
        return _KIND_RUNBOOKS.get(SignalKind(record.signal_kind))
    except ValueError:
        return None


def xid_explanation(code: int | None) -> str | None:
    info = xid.lookup(code) if code is not None else None
    if info is None:
        return None
    return (
        f"XID {info.code} — {info.name}. {info.explanation} NVIDIA: {info.immediate.value} now"
        + (f", {info.investigatory.value} when investigating" if info.investigatory else "")
        + (" (fatal)." if info.fatal else ".")
    )


def repeat_rule(policies: PolicySet | None) -> tuple[int, timedelta]:
    """The tightest `repeat` any active policy escalates on, else NVSentinel's default."""
    rules = [
        (p.match.repeat.count, p.match.repeat.within)
        for p in (policies.policies if policies else ())
        if p.match.repeat is not None
    ]
    return min(rules, default=DEFAULT_REPEAT)


def policy_source(files: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """(file, YAML text) of the policy called `name`, cut from the files as they were stored."""
    for file in sorted(files):
        text = files[file]
        try:
            root = yaml.compose(text)
        except yaml.YAMLError:
            continue
        if not isinstance(root, yaml.MappingNode):
            continue
        for key, value in root.value:
            if key.value != "policies" or not isinstance(value, yaml.SequenceNode):
                continue
            for item in value.value:
                if isinstance(item, yaml.MappingNode) and _named(item, name):
                    lines = text.splitlines()
                    end = _end_line(item, lines)
                    return file, "\n".join(lines[item.start_mark.line : end]) + "\n"
    return None


def _end_line(node: yaml.Node, lines: list[str]) -> int:
    """A block node's end mark sits where the next item starts (after its "- "): the node ends
    on the line before, less any blank lines."""
    mark = node.end_mark
    next_starts_here = mark.line >= len(lines) or not lines[mark.line][: mark.column].strip(" -")
    end = min(mark.line if next_starts_here else mark.line + 1, len(lines))
    while end > node.start_mark.line + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _named(item: yaml.MappingNode, name: str) -> bool:
    return any(k.value == "name" and getattr(v, "value", None) == name for k, v in item.value)


def detail_items(detail: Mapping[str, Any], limit: int = 240) -> list[tuple[str, str]]:
    """A timeline event's detail as short key/value lines (per-pod lists are shown apart)."""
    items: list[tuple[str, str]] = []
    for key, value in _facts(detail).items():
        if key in ("pods", "asked", "answered", "pending", "skipped") and isinstance(value, list):
            items.append((key, f"{len(value)}"))
            continue
        text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
        items.append((key, text if len(text) <= limit else text[: limit - 1] + "…"))
    return items


NEEDS_HUMAN = frozenset(WAITING_FOR_HUMAN | {State.FAILED})
# Open and moving without a human: what the "in flight" tile counts and its table lists.
WORKING = frozenset(OPEN - WAITING_FOR_HUMAN)


def _entry_detail(record: RemediationRecord, state: State) -> Mapping[str, Any]:
    """The detail of the newest transition into `state` (empty when there is none)."""
    for event in reversed(record.events):
        if event.to_state is state:
            return _facts(event.detail)
    return {}


def capacity_hold(record: RemediationRecord) -> bool:
    """Held before the drain because the pool had no spare node (the capacity check's facts)."""
    return record.state is State.HELD and "spare_capacity" in _entry_detail(record, State.HELD)


def current_step(record: RemediationRecord) -> int | None:
    """The index of the ladder rung being executed (or held, or failed in), None when no rung
    is: before approval, and once finished. Verification belongs to the replace rung."""
    state = record.state
    if state in (State.HELD, State.FAILED):
        state = entered_from(record, state) or state
    elif state is State.HELD_BY_OPT_OUT:
        state = next_work_state(parse_ladder(record.ladder), state) or State.QUARANTINED
    if state is State.VERIFYING:
        state = State.REPLACING
    for index, step in enumerate(record.ladder):
        if STEP_STATES.get(str(step.get("action"))) is state:
            return index
    return None


@dataclass(frozen=True)
class NextAction:
    """A command that would move a remediation on, and what it would do to the cluster."""

    command: str
    effect: str

    def __str__(self) -> str:
        return f"{self.command}: {self.effect}"


def waiting_reason(record: RemediationRecord) -> str:
    if record.state is State.AWAITING_APPROVAL:
        return f"policy {record.policy} asks a human to approve before it touches the node"
    if record.state is State.FAILED:
        return record.error or "failed without a recorded error"
    return record.hold_reason or f"{record.state.value} without a recorded reason"


def _step_name(state: State | None) -> str:
    return STEP_NAMES.get(state, state.value) if state else "the step"


def next_actions(record: RemediationRecord, gone: bool = False) -> list[NextAction]:
    """What each available command would do to this remediation's node, in plain words.
    `gone`: the node has left the cluster, so a failed step has nothing to be retried on."""
    node = record.node
    found: list[NextAction] = []
    if record.state is State.AWAITING_APPROVAL:
        ladder = " → ".join(str(step.get("action")) for step in record.ladder)
        found.append(NextAction("approve", f"starts the ladder on {node}: {ladder}"))
    if record.state is State.HELD_BY_OPT_OUT:
        pods = [p for p in _entry_detail(record, State.HELD_BY_OPT_OUT).get("pods") or ()]
        step = next_work_state(parse_ladder(record.ladder), record.state)
        victims = ", ".join(map(str, pods)) if pods else f"the opted-out pods on {node}"
        found.append(
            NextAction(
                "release",
                f"evicts {victims} (overrides the opt-out; goes on to {_step_name(step)})",
            )
        )
    if record.state is State.HELD:
        if capacity_hold(record):
            pool = _entry_detail(record, State.HELD).get("pool") or record.pool
            effect = f"waits for a spare node in pool {pool}, then drains {node}"
        else:
            effect = f"runs {_step_name(entered_from(record, State.HELD))} on {node} again"
        found.append(NextAction("release", effect))
    if record.state is State.FAILED and not gone:
        step = entered_from(record, State.FAILED)
        effect = (
            f"asks the node pool for a new replacement of {node}"
            if step is State.REPLACING
            else f"runs {_step_name(step)} on {node} again"
        )
        found.append(NextAction("retry", effect))
    if record.state in CANCELLABLE:
        touched = record.state not in (State.DETECTED, State.AWAITING_APPROVAL)
        effect = (
            f"stops here; the engine uncordons {node} if it is still in the cluster"
            if touched and not record.dry_run
            else "stops here; the node was not touched"
        )
        found.append(NextAction("cancel", effect))
    return found


@dataclass(frozen=True)
class WaitingItem:
    record: RemediationRecord
    reason: str
    actions: tuple[NextAction, ...]
    runbook: str | None


def waiting_item(record: RemediationRecord, gone: bool = False) -> WaitingItem:
    return WaitingItem(
        record, waiting_reason(record), tuple(next_actions(record, gone)), record_runbook(record)
    )


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) and abs(value) >= 1000 else f"{value:g}"


def _count(value: float) -> str:
    """A count of events: an integer. Prometheus' increase() extrapolates over its window
    (one error reads 1.00131 or 0.62), so round, and never show a positive count as 0."""
    return _number(max(1, round(value)) if value > 0 else 0)


def signal_value(signal: Signal) -> str:
    """A signal's value with its unit (what each source's query measures), "" when it has none.
    An XID's value is its code, shown as the code already."""
    value = signal.value
    if value is None or signal.kind in (SignalKind.XID, SignalKind.GPU_MISSING):
        return ""
    number = _number(value)
    problem = signal.labels.get("problem", "")
    match signal.kind:
        case SignalKind.THERMAL:
            return f"{number} °C"
        case SignalKind.NVLINK if problem == "link_down":
            link = signal.labels.get("link")
            return f"NVLink {link} down" if link else "NVLink down"
        case SignalKind.NVLINK:
            return f"{_count(value)} NVLink errors in the window"
        case SignalKind.ECC:
            return f"{_count(value)} double-bit ECC errors"
        case SignalKind.INFINIBAND if problem == "link_down":
            return f"port state {number}"
        case SignalKind.INFINIBAND if problem == "symbol_errors":
            return f"{number} symbol errors per hour"
        case SignalKind.INFINIBAND:
            return f"{_count(value)} link errors"
        case SignalKind.ROW_REMAP:
            return "row remap failed" if value else "no row remap failure"
        case _:
            return number


@dataclass(frozen=True)
class GpuHoursLost:
    """GPU-hours taken out of service (GPUs times quarantine to back in service, or to now while
    the node is still held) per UTC day of the quarantine and per policy; `unknown` counts the
    spans whose node reported no GPU count (not guessed, left out of the sums). `disrupted_*`:
    GPU-hours of the workload the remediations evicted, until it ran again (see
    model/disruption.py), on the same days and policies."""

    by_day: Mapping[date, Mapping[str, float]]
    by_policy: Mapping[str, float]
    counted: int
    unknown: int
    disrupted_by_day: Mapping[date, Mapping[str, float]] = field(default_factory=dict)
    disrupted_by_policy: Mapping[str, float] = field(default_factory=dict)


def gpu_hours(span: QuarantineSpan, now: datetime) -> float | None:
    if span.gpus is None:
        return None
    end = span.ended_at or now
    return span.gpus * max(0.0, (end - span.quarantined_at).total_seconds()) / 3600


def disrupted_gpu_hours(span: QuarantineSpan, now: datetime) -> float:
    return disruption.disrupted_gpu_hours(span.evictions, span.ended_at or now)


def _add(
    by_day: dict[date, dict[str, float]],
    by_policy: dict[str, float],
    span: QuarantineSpan,
    hours: float,
) -> None:
    day = by_day.setdefault(span.quarantined_at.date(), {})
    day[span.policy] = day.get(span.policy, 0.0) + hours
    by_policy[span.policy] = by_policy.get(span.policy, 0.0) + hours


def _largest_first(by_policy: dict[str, float]) -> dict[str, float]:
    return dict(sorted(by_policy.items(), key=lambda kv: -kv[1]))


def gpu_hours_lost(spans: Iterable[QuarantineSpan], now: datetime) -> GpuHoursLost:
    by_day: dict[date, dict[str, float]] = {}
    by_policy: dict[str, float] = {}
    hit_by_day: dict[date, dict[str, float]] = {}
    hit_by_policy: dict[str, float] = {}
    counted = unknown = 0
    for span in spans:
        if span.evictions:
            _add(hit_by_day, hit_by_policy, span, disrupted_gpu_hours(span, now))
        hours = gpu_hours(span, now)
        if hours is None:
            unknown += 1
            continue
        counted += 1
        _add(by_day, by_policy, span, hours)
    return GpuHoursLost(
        by_day,
        _largest_first(by_policy),
        counted,
        unknown,
        hit_by_day,
        _largest_first(hit_by_policy),
    )


def record_span(record: RemediationRecord) -> QuarantineSpan | None:
    """A remediation's own out-of-service span, as the repository builds it for the overview;
    None when it never quarantined the node (or only as a dry run)."""
    entered = [e.at for e in record.events if e.to_state is State.QUARANTINED]
    if record.dry_run or not entered:
        return None
    counted = next((e.detail for e in record.events if e.from_state is State.QUARANTINED), {})
    gpus = counted.get("gpus")
    return QuarantineSpan(
        remediation_id=record.id,
        policy=record.policy,
        node=record.node,
        quarantined_at=entered[0],
        gpus=gpus if isinstance(gpus, int) else None,
        ended_at=record.finished_at if record.state in (State.SUCCEEDED, State.CANCELLED) else None,
        evictions=disruption.evictions(e.detail for e in record.events),
    )

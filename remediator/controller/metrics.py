"""The controller's Prometheus metrics. The names are a contract: the alerts and the dashboard in
deploy/ query exactly these."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from remediator.model.agent_liveness import Judge
from remediator.model.states import OPEN, State
from remediator.policy.budget import HoldCause
from remediator.remediation.journal import entered_at
from remediator.remediation.planner import STEP_NAMES
from remediator.remediation.service import TransitionSeen
from remediator.signals.model import Signal
from remediator.signals.screen import Dropped, DropReason
from remediator.store.records import AgentStatus, ControllerStatus, RemediationRecord

# Steps take from milliseconds (a cordon) to many minutes (a drain behind a PDB, a replacement).
STEP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 3600)
# Gauged states: the open ones and failed (which holds its node until a human acts).
GAUGED = tuple(sorted((*OPEN, State.FAILED), key=lambda s: s.value))


def closing_outcome(before: State, after: State) -> str | None:
    """A remediation's outcome, counted once when it closes; None for a move that does not
    close it. Failed is not closed (a retry or its own pool may still fix it): a failure counts
    when the remediation closes without success from there."""
    if after is State.SUCCEEDED:
        return "succeeded"
    if after is State.CANCELLED:
        return "failed" if before is State.FAILED else "cancelled"
    return None


class AgentGauges:
    """The agents' gauges, two series per node, written out at scrape time from the last
    `agents` snapshot as exposition text appended to the registry's. At 10,000 agents,
    prometheus_client's exposition of these 20,000 samples cost ~90 ms of CPU per scrape (a
    third of an idle controller's CPU besides heartbeats, at a 30 s scrape); one pass of string
    formatting here is a few ms."""

    def __init__(self) -> None:
        self.statuses: Sequence[AgentStatus] = ()
        self.judge: Judge | None = None

    def exposition(self) -> bytes:
        up = [_HEAD_UP]
        age = [_HEAD_AGE]
        silent = 0
        judge = self.judge
        if judge is not None:
            statuses = {status.node: status for status in self.statuses}
            for name in judge.nodes(statuses):
                node = _label(name)
                status = statuses.get(name)
                seen_at = status.seen_at if status is not None else None
                is_silent = not judge.verdict(name, seen_at).alive
                silent += is_silent
                up.append(f'remediator_agent_up{{node="{node}"}} {0.0 if is_silent else 1.0}\n')
                if seen_at is None:
                    continue
                seconds = max(0.0, (judge.now - seen_at).total_seconds())
                age.append(f'remediator_agent_heartbeat_age_seconds{{node="{node}"}} {seconds}\n')
        count = f"{_HEAD_SILENT}remediator_agents_silent {float(silent)}\n"
        return "".join((*up, *age, count)).encode()


def _head(name: str, documentation: str) -> str:
    return f"# HELP {name} {documentation}\n# TYPE {name} gauge\n"


_HEAD_UP = _head(
    "remediator_agent_up",
    "1 while the node's agent reports; 0 when silent, crash-looping or not deployed (node "
    "health unknown).",
)
_HEAD_AGE = _head(
    "remediator_agent_heartbeat_age_seconds", "Seconds since the node agent's last heartbeat."
)
_HEAD_SILENT = _head(
    "remediator_agents_silent",
    "Node agents not reporting: silent, crash-looping (their pod) or not deployed.",
)


def _label(value: str) -> str:
    """A label value escaped as the text format wants (a node name never needs it)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return value


class ControllerMetrics:
    def __init__(self, registry: CollectorRegistry, sources: Iterable[str] = ()) -> None:
        """`sources`: the configured signal sources, whose drop counters start at zero."""
        self.remediations = Gauge(
            "remediator_remediations",
            "Remediations currently in each open state (and failed).",
            ["state"],
            registry=registry,
        )
        self.finished = Counter(
            "remediator_remediations_finished",
            "Remediations that ended, by outcome and policy, each once, when it closed: "
            "succeeded, failed (closed after it failed: cancelled, or its node left) or "
            "cancelled. A failed remediation is not closed (a retry or its pool may still fix "
            'it): it is in remediator_remediations{state="failed"} meanwhile.',
            ["outcome", "policy"],
            registry=registry,
        )
        self.resolved = Counter(
            "remediator_remediations_resolved",
            "Succeeded remediations by how the node was fixed: repaired (returned to service "
            "after a reset, reboot and diagnostics) or replaced (a spare took its place).",
            ["outcome", "policy"],
            registry=registry,
        )
        self.started = Counter(
            "remediator_remediations_started",
            "Remediations opened, by policy and the kind of signal that caused them.",
            ["policy", "signal_kind"],
            registry=registry,
        )
        self.step_duration = Histogram(
            "remediator_step_duration_seconds",
            "Time spent in each work step.",
            ["step"],
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        self.validations = Counter(
            "remediator_validations",
            "Validation runs (burn-in) by pool, GPU model, provider, whether the node was a new "
            "machine, and result: a failed new machine is dead on arrival.",
            ["pool", "gpu_model", "provider", "new_machine", "result"],
            registry=registry,
        )
        self.validation_check = Histogram(
            "remediator_validation_check_seconds",
            "Time each validation check took, its Jobs' run included.",
            ["check"],
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        self.oldest_open = Gauge(
            "remediator_oldest_open_remediation_seconds",
            "Age of the oldest remediation in each open state.",
            ["state"],
            registry=registry,
        )
        self.breaker_tripped = Gauge(
            "remediator_breaker_tripped", "1 while the storm breaker is tripped.", registry=registry
        )
        self.fleet_breaker_tripped = Gauge(
            "remediator_fleet_breaker_tripped",
            "1 while the fleet-wide breaker (shared by every cluster of the database) is tripped.",
            registry=registry,
        )
        self.queued = Gauge(
            "remediator_remediations_queued",
            "Remediations decided but queued, by what holds them (budget, breaker, pause).",
            ["cause"],
            registry=registry,
        )
        for cause in HoldCause:
            self.queued.labels(cause.value)
        self.paused = Gauge("remediator_paused", "1 while automation is paused.", registry=registry)
        self.source_up = Gauge(
            "remediator_source_up",
            "1 when the signal source answered its last poll.",
            ["source"],
            registry=registry,
        )
        self.is_leader = Gauge(
            "remediator_is_leader", "1 on the replica that acts.", registry=registry
        )
        self.policy_load_errors = Counter(
            "remediator_policy_load_errors",
            "Policy sets refused (the last good set stayed active).",
            registry=registry,
        )
        self.policy_set_info = Gauge(
            "remediator_policy_set_info",
            "The active policy set: its git commit and content hash.",
            ["commit", "hash"],
            registry=registry,
        )
        self.illegal_transitions = Counter(
            "remediator_illegal_transitions",
            "State changes the transition table refused.",
            registry=registry,
        )
        self._agents = AgentGauges()
        self.signals_dropped = Counter(
            "remediator_signals_dropped",
            "Signals dropped before evaluation, by the source that sent them and reason "
            "(unknown_node, gpu_out_of_range); one repeated within 5 minutes (a held alert, a "
            "re-scraped series) counts once. Also duplicate (folded into one seen within the "
            "fold window) and invalid_series (a Prometheus series that names no valid node or "
            "GPU).",
            ["source", "reason"],
            registry=registry,
        )
        for source in sources:
            for reason in DropReason:
                self.signals_dropped.labels(source, reason.value)
        self.signals_received = Counter(
            "remediator_signals_received",
            "Signals taken in, by source and kind (before folding and policies).",
            ["source", "kind"],
            registry=registry,
        )
        self.signal_dispositions = Counter(
            "remediator_signal_dispositions",
            "What became of each signal accepted (after the screen), by disposition: opened, "
            "queued, joined (the node's open remediation), folded (a duplicate within the fold "
            "window), cooldown, suppressed (a human's cancel), below_threshold, "
            "burst_not_reached, no_policy, not_decided. Every kind but opened and queued is a "
            "signal that opened nothing; its text is on the node page and in "
            "GET /api/v1/signals?node=.",
            ["disposition"],
            registry=registry,
        )
        for step in STEP_NAMES.values():
            self.step_duration.labels(step)

    def received(self, source: str, signals: Iterable[Signal]) -> None:
        for signal in signals:
            self.signals_received.labels(source, signal.kind.value).inc()

    def disposed(self, counts: Mapping[str, int]) -> None:
        for disposition, count in counts.items():
            self.signal_dispositions.labels(disposition).inc(count)

    def dropped_count(self, source: str, reason: str, count: int) -> None:
        if count:
            self.signals_dropped.labels(source, reason).inc(count)

    def transition(self, seen: TransitionSeen) -> None:
        step = STEP_NAMES.get(seen.before.state)
        if step is not None:
            self.step_duration.labels(step).observe(seen.seconds_in_state)
        if seen.before.state is State.VALIDATING:
            self._validated(seen.action, seen.detail)

    def _validated(self, action: str, detail: Mapping[str, Any]) -> None:
        if action not in ("validate_done", "validate_failed"):
            return
        self.validations.labels(
            str(detail.get("pool") or ""),
            str(detail.get("gpu_model") or ""),
            str(detail.get("provider") or ""),
            "true" if detail.get("new_machine") else "false",
            "passed" if action == "validate_done" else "failed",
        ).inc()
        for check in detail.get("checks") or ():
            if isinstance(check, Mapping) and check.get("seconds") is not None:
                self.validation_check.labels(str(check.get("check"))).observe(
                    float(check["seconds"])
                )

    def opened(self, records: Iterable[RemediationRecord]) -> None:
        for record in records:
            self.started.labels(record.policy, record.signal_kind).inc()

    def dropped(self, dropped: Iterable[Dropped]) -> None:
        for item in dropped:
            self.signals_dropped.labels(item.signal.source, item.reason.value).inc()

    def closed(self, before: State, after: RemediationRecord) -> None:
        """The store closed a remediation (each one once: nothing leaves a terminal state),
        whoever closed it: the engine, a command, the node-gone sweep, the intake."""
        outcome = closing_outcome(before, after.state)
        if outcome is None:
            return
        self.finished.labels(outcome, after.policy).inc()
        if after.state is State.SUCCEEDED and after.outcome is not None:
            self.resolved.labels(after.outcome, after.policy).inc()

    def illegal(self, _record: RemediationRecord, _target: State) -> None:
        self.illegal_transitions.inc()

    def policy_set(self, commit: str | None, content_hash: str) -> None:
        self.policy_set_info.clear()
        self.policy_set_info.labels(commit or "", content_hash).set(1)

    def agents(self, statuses: Sequence[AgentStatus], judge: Judge) -> None:
        """Per node: up (reporting) or not (silent, crash-looping, not deployed), and the
        heartbeat's age; a node with neither a heartbeat nor an agent pod has no series."""
        self._agents.statuses, self._agents.judge = statuses, judge

    def agents_exposition(self) -> bytes:
        """The agents' series as text, for /metrics after the registry's."""
        return self._agents.exposition()

    def refresh(
        self,
        fencing: Sequence[RemediationRecord],
        status: ControllerStatus,
        now: datetime,
    ) -> None:
        """Set the gauges from the store (records with their events: the age is the time in
        the current state). Outcomes are counted at their transitions, not here."""
        counts = dict.fromkeys(GAUGED, 0)
        oldest: dict[State, datetime] = {}
        queued = {cause.value: 0 for cause in HoldCause}
        for record in fencing:
            if record.state is State.QUEUED:
                cause = record.queue_cause or HoldCause.BUDGET.value
                queued[cause] = queued.get(cause, 0) + 1
            counts[record.state] = counts.get(record.state, 0) + 1
            since = entered_at(record, record.state)
            if record.state not in oldest or since < oldest[record.state]:
                oldest[record.state] = since
        for state, count in counts.items():
            self.remediations.labels(state.value).set(count)
            first = oldest.get(state)
            self.oldest_open.labels(state.value).set(
                (now - first).total_seconds() if first else 0.0
            )
        for cause, count in queued.items():
            self.queued.labels(cause).set(count)
        self.breaker_tripped.set(1 if status.breaker_tripped else 0)
        self.paused.set(1 if status.paused else 0)

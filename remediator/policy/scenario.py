"""Policy scenarios: a fleet, a timeline of signals and the decisions expected, run with a fake
clock through the very evaluate and admit functions the controller uses, so CI can show what a
policy change does before it merges. An expectation can also follow the admitted remediation's
path through the engine's planner for stated step results — a repair that fails, the Nth
validation failing some checks — given the walk (remediation/walk.py, passed in by the CLI so
this package never imports the planner)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from remediator.errors import PolicyError
from remediator.model.topology import build_topology, domain_map
from remediator.policy.budget import Admission, BreakerState, ClusterState, admit
from remediator.policy.domains_out import Holding, domains_held
from remediator.policy.durations import Duration, format_duration
from remediator.policy.evaluate import Decision, EvalState, History, PastRemediation, evaluate
from remediator.policy.ladder import LadderStep, ladder_from_policy
from remediator.policy.loader import PolicySet, parse_yaml, validate_model
from remediator.policy.schema import GlobalSettings
from remediator.policy.scope import fold_scopes
from remediator.signals.model import Signal, SignalKind

SCENARIO_START = datetime(2026, 1, 1, tzinfo=UTC)
# A remediation's path for a ladder, the steps that fail and each validation's failing checks.
Walk = Callable[[Sequence[LadderStep], Collection[str], Sequence[Collection[str]]], list[str]]
Check = Literal["inventory", "dcgm", "nccl", "nccl_pair"]
FailingStep = Literal[
    "checkpoint", "drain", "reset_gpu", "reboot", "diagnose", "replace", "rma", "verify", "uncordon"
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FleetNode(_Strict):
    name: str
    pool: str
    labels: dict[str, str] = Field(default_factory=dict)


class PastEntry(_Strict):
    node: str
    policy: str
    ago: Duration
    outcome: str = "succeeded"


class SignalSpec(_Strict):
    node: str
    kind: SignalKind
    gpu: int | None = None
    gpu_uuid: str | None = None
    code: int | None = None
    value: float | None = None
    labels: dict[str, str] = Field(default_factory=dict)


class TimelineEntry(_Strict):
    """Signals at `at`, repeated `every` until `until` (inclusive) when given; `resolve` closes
    the named nodes' open remediations, as a finished remediation would."""

    at: Duration
    every: Duration | None = None
    until: Duration | None = None
    signals: list[SignalSpec] = Field(default_factory=list)
    resolve: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _repeat(self) -> TimelineEntry:
        if (self.every is None) != (self.until is None):
            raise ValueError("every and until go together")
        if self.every is not None and self.every <= timedelta(0):
            raise ValueError("every must be positive")
        return self

    def times(self) -> Iterator[timedelta]:
        at = self.at
        while True:
            yield at
            if self.every is None or self.until is None or at + self.every > self.until:
                return
            at += self.every


class Validation(_Strict):
    """One run of the validate step: the checks it fails (none: it passes)."""

    fails: list[Check] = Field(default_factory=list)


class Steps(_Strict):
    """How the remediation's steps go: each succeeds unless `fail` names it (then it fails
    every time it runs); the Nth run of the validate step fails the checks `validation[N-1]`
    names, and passes past the end of the list."""

    fail: list[FailingStep] = Field(default_factory=list)
    validation: list[Validation] = Field(default_factory=list)


class Expectation(_Strict):
    """`policy: none` means no decision at all for the node at that moment. `ladder`, when
    given, is the decision's steps as the engine will run them (notify left out), a fallback
    written `replace (on failure)`, a named fallback ladder's steps `reboot (on failure: NAME)`.
    `path` (the states after `detected`, in order) and `ends` (the last of them) follow the
    admitted remediation through the planner with the step results `steps` states."""

    at: Duration
    node: str
    policy: str
    outcome: Literal["admitted", "held"] = "admitted"
    ladder: list[str] | None = None
    steps: Steps | None = None
    path: list[str] | None = None
    ends: Literal["succeeded", "held", "failed"] | None = None

    @model_validator(mode="after")
    def _walked(self) -> Expectation:
        if self.steps is not None and self.path is None and self.ends is None:
            raise ValueError("steps needs path or ends: what the remediation should do")
        if (self.path is not None or self.ends is not None) and self.policy == "none":
            raise ValueError("path and ends follow a decision; policy none has none")
        return self

    @property
    def walks(self) -> bool:
        return self.path is not None or self.ends is not None


class Scenario(_Strict):
    name: str
    start: AwareDatetime = SCENARIO_START
    settings: dict[str, Any] = Field(default_factory=dict)
    fleet: list[FleetNode] = Field(min_length=1)
    history: list[PastEntry] = Field(default_factory=list)
    timeline: list[TimelineEntry] = Field(default_factory=list)
    expect: list[Expectation] = Field(min_length=1)


class ScenarioFile(_Strict):
    scenarios: list[Scenario] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class Outcome:
    scenario: str
    expectation: Expectation
    actual: str
    passed: bool

    def line(self) -> str:
        want = self.expectation.policy
        if want != "none":
            want += f" ({self.expectation.outcome})"
        if self.expectation.ladder is not None:
            want += f" ladder {' → '.join(self.expectation.ladder)}"
        if self.expectation.path is not None:
            want += f" path {' → '.join(self.expectation.path)}"
        if self.expectation.ends is not None:
            want += f" ending {self.expectation.ends}"
        verdict = "PASS" if self.passed else "FAIL"
        at = format_duration(self.expectation.at)
        text = f"{verdict} {self.scenario} @{at} {self.expectation.node}: expected {want}"
        return text if self.passed else f"{text}, got {self.actual}"


def load_scenarios(path: Path) -> list[Scenario]:
    problems: list[str] = []
    parsed = parse_yaml(str(path), path.read_text(encoding="utf-8"), problems)
    if parsed is not None:
        model = validate_model(ScenarioFile, str(path), parsed[0], parsed[1], problems)
        if isinstance(model, ScenarioFile) and not problems:
            return list(model.scenarios)
    raise PolicyError(problems)


def run_scenario(
    scenario: Scenario, policy_set: PolicySet, walk: Walk | None = None
) -> list[Outcome]:
    settings = policy_set.settings
    if scenario.settings:
        merged = settings.model_dump(mode="json") | scenario.settings
        settings = GlobalSettings.model_validate(merged)
    pools = {n.name: n.pool for n in scenario.fleet}
    labels = {n.name: dict(n.labels) for n in scenario.fleet}
    topology = build_topology(labels)
    domains = domain_map(labels)
    per_pool: dict[str, int] = {}
    for member in scenario.fleet:
        per_pool[member.pool] = per_pool.get(member.pool, 0) + 1
    start = scenario.start
    kinds = {p.name: p.match.kind.value for p in policy_set.policies}
    scopes = {p.name: p.scope for p in policy_set.policies}
    past = [
        PastRemediation(e.node, e.policy, start - e.ago, e.outcome, kinds.get(e.policy))
        for e in scenario.history
    ]
    open_nodes: dict[str, str] = {}  # lead node → policy of its open remediation
    members: dict[str, tuple[str, ...]] = {}
    lead_of: dict[str, str] = {}
    state = EvalState()
    breaker = BreakerState()

    signals_at: dict[timedelta, list[Signal]] = {}
    resolve_at: dict[timedelta, list[str]] = {}
    for step in scenario.timeline:
        for offset in step.times():
            batch = signals_at.setdefault(offset, [])
            batch.extend(_signal(spec, start + offset) for spec in step.signals)
            resolve_at.setdefault(offset, []).extend(step.resolve)
    ticks = sorted({*signals_at, *resolve_at, *(e.at for e in scenario.expect)})

    seen: dict[timedelta, Admission] = {}
    for offset in ticks:
        now = start + offset
        for node in resolve_at.get(offset, ()):
            open_nodes.pop(lead_of.get(node, node), None)
        # A clique or domain remediation holds every tray of its unit (policy/scope.py).
        lead_of = {m: lead for lead in open_nodes for m in members.get(lead, (lead,))}
        held = {m: open_nodes[lead] for m, lead in lead_of.items()}
        history = History.build(
            remediations=past, open=held, pools=pools, labels=labels, state=state
        )
        result = evaluate(signals_at.get(offset, ()), history, policy_set.policies, now, settings)
        state = result.state
        decisions = fold_scopes(result.decisions, topology)
        unhealthy: dict[str, set[str]] = {}
        for node in held:
            unhealthy.setdefault(pools.get(node, ""), set()).add(node)
        domains_out, fenced_trays = domains_held(
            (Holding(n, pools.get(n, ""), scopes.get(p, "node")) for n, p in open_nodes.items()),
            domains,
            labels,
        )
        cluster = ClusterState(
            nodes_per_pool=per_pool,
            unhealthy={pool: frozenset(nodes) for pool, nodes in unhealthy.items()},
            open_remediations=len(open_nodes),
            domains=domains,
            domains_out=domains_out,
            fenced_trays=fenced_trays,
            domain_policies=frozenset(p for p, scope in scopes.items() if scope == "domain"),
        )
        admission = admit(decisions, cluster, settings, breaker, now)
        breaker = admission.breaker
        for decision in admission.admitted:
            if decision.disruptive:
                open_nodes[decision.node] = decision.policy
                members[decision.node] = decision.members or (decision.node,)
            past.append(
                PastRemediation(
                    decision.node,
                    decision.policy,
                    now,
                    "started",
                    kinds.get(decision.policy),
                    gpus=frozenset(s.gpu_uuid for s in decision.signals if s.gpu_uuid),
                )
            )
        seen[offset] = admission

    known = {p.name for p in policy_set.policies}
    return [
        _unknown(scenario.name, e)
        if e.policy not in known | {"none"}
        else _check(scenario.name, e, seen[e.at], walk)
        for e in scenario.expect
    ]


def _unknown(name: str, expectation: Expectation) -> Outcome:
    """A typo in an expected policy name must fail, not pass as 'nothing happened'."""
    return Outcome(name, expectation, "no such policy in the set", False)


def _signal(spec: SignalSpec, at: datetime) -> Signal:
    return Signal(
        node=spec.node,
        kind=spec.kind,
        source="scenario",
        observed_at=at,
        gpu=spec.gpu,
        gpu_uuid=spec.gpu_uuid,
        code=spec.code,
        value=spec.value,
        labels=spec.labels,
    )


def ladder_names(decision: Decision) -> list[str]:
    """The decision's ladder as stored on its remediation, in the scenario files' words."""
    return [
        _rung_name(step.action, step.fallback, step.ladder)
        for step in ladder_from_policy(decision.actions, decision.on_failure, decision.fallbacks)
        if step.action != "notify"
    ]


def _rung_name(action: str, fallback: bool | None, ladder: str | None) -> str:
    if not fallback:
        return action
    return f"{action} (on failure: {ladder})" if ladder else f"{action} (on failure)"


def _check(name: str, expectation: Expectation, admission: Admission, walk: Walk | None) -> Outcome:
    node = expectation.node
    actual = "none"
    outcome: str | None = None
    found: Decision | None = None
    for decision in admission.admitted:
        if decision.node == node:
            actual, outcome, found = decision.policy, "admitted", decision
    for held in admission.held:
        if held.decision.node == node:
            actual, outcome, found = held.decision.policy, "held", held.decision
    if outcome is not None and found is not None:
        passed = expectation.policy == actual and expectation.outcome == outcome
        actual = f"{actual} ({outcome})"
        if expectation.ladder is not None:
            ladder = ladder_names(found)
            passed = passed and ladder == expectation.ladder
            actual += f" ladder {' → '.join(ladder)}"
        if expectation.walks:
            path = _walk(found, expectation.steps or Steps(), walk)
            passed = passed and bool(path) and _matches(expectation, path)
            actual += f" path {' → '.join(path) or '(no walk: run it with remediator policy test)'}"
    else:
        passed = expectation.policy == "none"
    return Outcome(name, expectation, actual, passed)


def _walk(decision: Decision, steps: Steps, walk: Walk | None) -> list[str]:
    if walk is None:
        return []
    ladder = ladder_from_policy(decision.actions, decision.on_failure, decision.fallbacks)
    return walk(ladder, frozenset(steps.fail), [frozenset(v.fails) for v in steps.validation])


def _matches(expectation: Expectation, path: list[str]) -> bool:
    if expectation.path is not None and path != expectation.path:
        return False
    return expectation.ends is None or path[-1] == expectation.ends

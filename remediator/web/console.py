"""What the API and the pages both show, built once: records from the store plus the views'
arithmetic, as the API's models. The pages render these same objects."""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Any

from remediator.model.states import State
from remediator.store.records import QuarantineSpan, RemediationRecord
from remediator.web import views
from remediator.web.agent_views import agents_out
from remediator.web.deps import WebDeps
from remediator.web.pending import pending_command
from remediator.web.schemas import (
    ControllerOut,
    EventOut,
    OverviewOut,
    PodOut,
    PoliciesOut,
    PolicyOut,
    PolicySetOut,
    PolicySourceOut,
    RemediationDetailOut,
    RemediationOut,
    SlurmJobOut,
    SourceOut,
)

GPU_HOURS_WINDOW = timedelta(days=14)


def runbook_url(slug: str | None) -> str | None:
    return f"/runbooks/{slug}" if slug else None


def remediation_out(record: RemediationRecord, now: datetime, gone: bool = False) -> RemediationOut:
    """The guidance fields (current step, what a human could do) need the timeline: they are
    left empty for records read without it (every remediation has at least one event). `gone`:
    its node has left the cluster (no retry is offered)."""
    guidance: dict[str, Any] = {}
    if record.events:
        guidance = {
            "current_step": views.current_step(record),
            "needs_human": (
                views.waiting_reason(record) if record.state in views.NEEDS_HUMAN else None
            ),
            "next_actions": [
                {"command": a.command, "effect": a.effect} for a in views.next_actions(record, gone)
            ],
        }
    return RemediationOut.model_validate(
        {
            **{
                name: getattr(record, name)
                for name in RemediationOut.model_fields
                if hasattr(record, name)
            },
            "signals": list(record.signals),
            "ladder": [dict(step) for step in record.ladder],
            "duration_seconds": views.elapsed(record, now),
            "runbook_url": runbook_url(views.record_runbook(record)),
            **guidance,
        }
    )


class PolicyTexts:
    """Policy YAML cut from recorded policy sets, remembered: a set is named by the hash of its
    contents, so what was cut once never changes, and parsing YAML is the detail page's main
    cost. Bounded, since hashes only accumulate. Only hits are kept: a set recorded after a
    first miss must still show. Locked, since FastAPI serves sync routes from a thread pool."""

    def __init__(self, size: int = 512) -> None:
        self._size = size
        self._cut: OrderedDict[tuple[str, str], PolicySourceOut] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, deps: WebDeps, content_hash: str, policy: str) -> PolicySourceOut | None:
        key = (content_hash, policy)
        with self._lock:
            hit = self._cut.get(key)
            if hit is not None:
                self._cut.move_to_end(key)
                return hit
        found = self._load(deps, content_hash, policy)
        if found is not None:
            with self._lock:
                self._cut[key] = found
                if len(self._cut) > self._size:
                    self._cut.popitem(last=False)
        return found

    @staticmethod
    def _load(deps: WebDeps, content_hash: str, policy: str) -> PolicySourceOut | None:
        stored = deps.repository.policy_set_by_hash(content_hash)
        if stored is None:
            return None
        found = views.policy_source(stored.files, policy)
        if found is None:
            return None
        file, text = found
        return PolicySourceOut(
            file=file, commit=stored.commit, content_hash=stored.content_hash, yaml=text
        )


def policy_source(
    deps: WebDeps, texts: PolicyTexts, record: RemediationRecord
) -> PolicySourceOut | None:
    """The policy's YAML as it was when it decided: the active set if it is still that one,
    else the recorded copy of the set with the remediation's hash."""
    active = deps.policies.active
    if active is not None and record.policy_hash == active.content_hash:
        text = active.source_of(record.policy)
        origin = active.origins.get(record.policy)
        if text is not None and origin is not None:
            return PolicySourceOut(
                file=origin.file, commit=active.commit, content_hash=active.content_hash, yaml=text
            )
    if record.policy_hash is None:
        return None
    return texts.get(deps, record.policy_hash, record.policy)


def remediation_detail(
    deps: WebDeps, texts: PolicyTexts, record: RemediationRecord, now: datetime
) -> RemediationDetailOut:
    base = remediation_out(record, now, deps.node_known(record.node) is False)
    span = views.record_span(record)
    return RemediationDetailOut(
        **base.model_dump(),
        events=[EventOut.model_validate(e) for e in record.events],
        pods=[PodOut.model_validate(p) for p in views.pods(record.events)],
        slurm_jobs=[SlurmJobOut.model_validate(j) for j in views.slurm_jobs(record.events)],
        policy_source=policy_source(deps, texts, record),
        xid_explanation=views.xid_explanation(record.xid_code),
        gpu_hours_out_of_service=_rounded(views.gpu_hours(span, now)) if span else None,
        gpu_hours_disrupted=_rounded(views.disrupted_gpu_hours(span, now)) if span else None,
        pending=pending_command(
            record, lambda: deps.repository.controller_status().leader_seen_at, now
        ),
    )


def _rounded(hours: float | None) -> float | None:
    return round(hours, 3) if hours is not None else None


def policies_out(deps: WebDeps) -> PoliciesOut:
    active = deps.policies.active
    error = deps.policies.last_error
    if active is None:
        return PoliciesOut(active=None, last_error=error.problems if error else None)
    items = []
    for policy in active.policies:
        origin = active.origins.get(policy.name)
        items.append(
            PolicyOut(
                name=policy.name,
                description=policy.description,
                why=policy.why,
                kind=policy.match.kind.value,
                priority=policy.priority,
                approval=policy.approval,
                dry_run=policy.dry_run,
                actions=[step.action for step in policy.actions],
                file=origin.file if origin else None,
                yaml=active.source_of(policy.name),
            )
        )
    return PoliciesOut(
        active=PolicySetOut(
            commit=active.commit,
            dirty=active.dirty,
            content_hash=active.content_hash,
            loaded_at=active.loaded_at,
            warnings=list(active.warnings),
            settings=active.settings.model_dump(mode="json", by_alias=True),
            policies=items,
        ),
        last_error=error.problems if error else None,
    )


def recent_spans(deps: WebDeps, now: datetime) -> tuple[QuarantineSpan, ...]:
    """The quarantines the overview's GPU-hours count: those that began in GPU_HOURS_WINDOW."""
    return deps.repository.quarantine_spans(since=now - GPU_HOURS_WINDOW)


def overview_out(deps: WebDeps, spans: tuple[QuarantineSpan, ...] | None = None) -> OverviewOut:
    """`spans`: `recent_spans` at this `now`, when the caller has read them already."""
    now = deps.clock.now()
    overview = deps.repository.overview()
    # Only the agents not reporting are shown one by one (silent, crash-looping, not deployed).
    reporting, silent = agents_out(deps, alive=False)
    counts = overview.by_state
    lost = views.gpu_hours_lost(recent_spans(deps, now) if spans is None else spans, now)
    return OverviewOut(
        in_flight=sum(n for state, n in counts.items() if state in views.WORKING),
        awaiting_approval=counts.get(State.AWAITING_APPROVAL, 0),
        held_by_opt_out=counts.get(State.HELD_BY_OPT_OUT, 0),
        held=counts.get(State.HELD, 0),
        failed_last_24h=overview.failed_last_24h,
        by_state={state.value: n for state, n in counts.items()},
        open_by_pool=dict(overview.open_by_pool),
        repaired=overview.by_outcome.get("repaired", 0),
        replaced=overview.by_outcome.get("replaced", 0),
        spares_saved=overview.by_outcome.get("repaired", 0),
        controller=ControllerOut.of(deps.repository.controller_status()),
        sources=[SourceOut.model_validate(s) for s in deps.repository.source_health()],
        agents_reporting=reporting,
        silent_agents=silent,
        gpu_hours_out_of_service_by_policy={
            policy: round(hours, 3) for policy, hours in lost.by_policy.items()
        },
        gpu_hours_disrupted_by_policy={
            policy: round(hours, 3) for policy, hours in lost.disrupted_by_policy.items()
        },
    )

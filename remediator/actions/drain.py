"""Drain: move every movable pod off the node through the Eviction API, as `kubectl drain` does.

Each call is one round: list the node's pods, evict the ones not yet terminating in parallel (a
bounded thread pool) with the policy's grace period, and report. A pod a PodDisruptionBudget
protects (429) is retried with backoff on a later round, and so is one the API server did not
take (overload, outage: retried no sooner than its Retry-After, and said so in the round's
reason); the drain is done when no movable pod is left on the node. Past the drain timeout the
policy decides: `force` deletes the rest with the same grace period (the workload still gets its
SIGTERM), `hold` stops and names the blockers.
A pod still terminating after its grace ran out is one no kubelet is removing (a dead or
partitioned node): past the timeout, `force` deletes it at once (grace 0) and `hold` names it.

When budgets refuse evictions, the round lists the PodDisruptionBudgets of the refused pods'
namespaces (once per namespace per round) and says which budget holds which pod and with what
numbers, in the progress facts and in the hold reason: that is what on-call must scale or fix.
A budget list that fails (RBAC, an outage) only costs that detail: the 429's own message stays.

The rounds are idempotent: a pod already terminating is not evicted again, so a crash and restart
only costs one extra list call. The per-pod backoff lives in memory; losing it on a restart only
means one early retry.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from remediator.actions import pdbs
from remediator.actions.outcome import Done, Held, Outcome, Waiting
from remediator.actions.pods import eviction_facts, movable, skip_reason
from remediator.clock import Clock, SystemClock
from remediator.errors import (
    ApiUnavailable,
    ConflictError,
    NotActing,
    NotFoundError,
    RemediatorError,
)
from remediator.kube.client import KubeClient
from remediator.kube.objects import (
    EvictionOutcome,
    EvictionResult,
    Pod,
    PodDisruptionBudget,
    format_time,
)

log = logging.getLogger(__name__)

DEFAULT_GRACE_SECONDS = 120
# Refusals a budget explains: 429 (it allows no disruption) and 500 (several select the pod).
_BUDGET_REFUSALS = frozenset(
    {EvictionResult.BLOCKED_BY_PDB.value, EvictionResult.MULTIPLE_PDBS.value}
)


class OnTimeout(StrEnum):
    FORCE = "force"
    HOLD = "hold"


@dataclass(frozen=True)
class DrainPlan:
    evict: tuple[Pod, ...]
    terminating: tuple[Pod, ...]
    backing_off: tuple[Pod, ...]
    skipped: tuple[tuple[str, str], ...]

    @property
    def remaining(self) -> int:
        return len(self.evict) + len(self.terminating) + len(self.backing_off)


def plan_drain(pods: Iterable[Pod], not_before: Mapping[str, float], monotonic: float) -> DrainPlan:
    """Sort the node's pods: skip, wait for (terminating), evict now, or evict after backoff.

    `not_before` maps a pod UID to the monotonic time of its next allowed eviction attempt.
    """
    pods = list(pods)
    skipped = tuple(sorted((p.key, r) for p in pods if (r := skip_reason(p)) is not None))
    evict, terminating, backing_off = [], [], []
    for pod in movable(pods):
        if pod.terminating:
            terminating.append(pod)
        elif not_before.get(pod.uid, 0.0) > monotonic:
            backing_off.append(pod)
        else:
            evict.append(pod)
    return DrainPlan(tuple(evict), tuple(terminating), tuple(backing_off), skipped)


def overdue(terminating: Iterable[Pod], now: datetime) -> tuple[Pod, ...]:
    """Terminating pods whose grace period has run out: waiting longer will not remove them."""
    return tuple(
        p for p in terminating if p.deletion_timestamp is not None and p.deletion_timestamp < now
    )


def backoff_seconds(attempts: int, base: float = 1.0, cap: float = 5.0) -> float:
    """1, 2, 4, then every 5 s (kubectl's fixed PDB retry interval) while a budget forbids."""
    return min(cap, base * 2 ** max(0, attempts - 1))


@dataclass
class _Blocked:
    attempts: int = 0
    not_before: float = 0.0
    message: str = ""
    result: str = ""


@dataclass
class _NodeState:
    blocked: dict[str, _Blocked] = field(default_factory=dict)


@dataclass(frozen=True)
class _Attempt:
    pod: Pod
    outcome: EvictionOutcome


class Drainer:
    """Drain rounds with per-pod backoff; one call per node at a time (the engine's node lock),
    while different nodes may be drained from different threads."""

    def __init__(
        self,
        client: KubeClient,
        clock: Clock | None = None,
        *,
        workers: int = 16,
        poll_seconds: float = 1.0,
    ) -> None:
        self._client = client
        self._clock = clock or SystemClock()
        self._workers = workers
        self._poll = poll_seconds
        self._nodes: dict[str, _NodeState] = {}

    def drain(
        self,
        node: str,
        *,
        started_at: datetime,
        grace_seconds: int | None = DEFAULT_GRACE_SECONDS,
        timeout_seconds: float = 600.0,
        on_timeout: OnTimeout = OnTimeout.HOLD,
        grace_for: Callable[[Pod], int] | None = None,
    ) -> Outcome:
        """One round. `grace_for` gives each pod its own grace (the rest of its clock, after a
        grace step), instead of `grace_seconds` for all."""
        state = self._nodes.setdefault(node, _NodeState())

        def grace(pod: Pod) -> int | None:
            return grace_for(pod) if grace_for is not None else grace_seconds

        pods = self._client.list_pods_on_node(node)
        now, mono = self._clock.now(), self._clock.monotonic()
        not_before = {uid: b.not_before for uid, b in state.blocked.items()}
        plan = plan_drain(pods, not_before, mono)
        present = {p.uid for p in pods}
        state.blocked = {uid: b for uid, b in state.blocked.items() if uid in present}
        elapsed = (now - started_at).total_seconds()
        timed_out = elapsed > timeout_seconds

        if plan.remaining == 0:
            self._nodes.pop(node, None)
            return Done(
                f"node {node} drained ({len(plan.skipped)} pod(s) left in place)",
                self._facts(node, pods, plan, {}, elapsed, {}),
            )

        stuck = overdue(plan.terminating, now) if timed_out else ()
        if timed_out and on_timeout is OnTimeout.FORCE:
            victims = [*plan.evict, *plan.backing_off]
            results = self._parallel(victims, lambda p: self._force(p, grace(p)))
            results += self._parallel(list(stuck), lambda p: self._force(p, 0))
            facts = self._facts(node, pods, plan, {a.pod.uid: a for a in results}, elapsed, {})
            return Waiting(
                f"drain timeout of {timeout_seconds:.0f}s passed: force-deleted "
                f"{len(victims) + len(stuck)} pod(s), waiting for {plan.remaining} to terminate",
                self._poll,
                facts,
            )

        results = self._evict(state, [(p, grace(p)) for p in plan.evict], mono)
        attempts = {a.pod.uid: a for a in results}

        blockers = [
            (p, state.blocked[p.uid])
            for p in (*plan.evict, *plan.backing_off)
            if p.uid in state.blocked
        ]
        held_by_budget = [p for p, b in blockers if b.result in _BUDGET_REFUSALS]
        budgets, lookup_error = self._budgets(held_by_budget)
        facts = self._facts(node, pods, plan, attempts, elapsed, budgets)
        if lookup_error:
            facts["pdb_lookup_error"] = lookup_error
        why = {p.uid: pdbs.explain(p, budgets.get(p.namespace, ())) for p in held_by_budget}

        if timed_out and (blockers or stuck):
            return Held(
                f"drain of {node} exceeded {timeout_seconds:.0f}s; blocked: "
                + "; ".join(
                    [f"{p.key}: {why.get(p.uid) or b.message}" for p, b in blockers]
                    + [
                        f"{p.key}: still terminating after its grace period ran out "
                        "(is the node's kubelet down?)"
                        for p in stuck
                    ]
                ),
                facts,
            )
        waits = [b.not_before - mono for _, b in blockers]
        if plan.terminating or len(blockers) < len(plan.evict) + len(plan.backing_off):
            waits.append(self._poll)
        retry = max(0.1, min(waits)) if waits else self._poll
        reason = f"draining {node}: {plan.remaining} pod(s) left, {len(blockers)} blocked"
        trouble = [a.outcome for a in results if a.outcome.result is EvictionResult.API_UNAVAILABLE]
        if trouble:
            # Said first: on-call must see that the API, not the workload, holds the drain.
            reason = f"Kubernetes API unavailable: {trouble[0].message}, retrying; {reason}"
        lines = dict.fromkeys(
            pdbs.describe(b)
            for p in held_by_budget
            for b in pdbs.blocking(p, budgets.get(p.namespace, ()))
        )
        if lines:
            reason += "; " + "; ".join(lines)
        return Waiting(reason, retry, facts)

    # -- doing -------------------------------------------------------------------------------

    def evict(self, node: str, victims: Sequence[tuple[Pod, int]]) -> dict[str, EvictionOutcome]:
        """Evict these pods now, each with its own grace, skipping those a budget refused a
        moment ago (their backoff is the drain's to keep); outcomes by pod key. The grace step
        uses it to send every SIGTERM at its start."""
        state = self._nodes.setdefault(node, _NodeState())
        mono = self._clock.monotonic()
        due = [
            (p, g) for p, g in victims if state.blocked.get(p.uid, _Blocked()).not_before <= mono
        ]
        return {a.pod.key: a.outcome for a in self._evict(state, due, mono)}

    def api_backoff(self, node: str, pods: Iterable[Pod]) -> tuple[str, float] | None:
        """The API's last refusal among these pods and the seconds until the first may be asked
        again, when the Kubernetes API (not a budget) turned them away."""
        state = self._nodes.get(node)
        if state is None:
            return None
        refused = [
            b
            for p in pods
            if (b := state.blocked.get(p.uid)) is not None
            and b.result == EvictionResult.API_UNAVAILABLE.value
        ]
        if not refused:
            return None
        mono = self._clock.monotonic()
        return refused[0].message, max(0.1, min(b.not_before for b in refused) - mono)

    def _evict(
        self, state: _NodeState, victims: Sequence[tuple[Pod, int | None]], mono: float
    ) -> list[_Attempt]:
        graces = {p.uid: g for p, g in victims}
        results = self._parallel(
            [p for p, _ in victims],
            lambda p: self._client.evict_pod(p.namespace, p.name, graces[p.uid], p.uid),
        )
        for attempt in results:
            if attempt.outcome.result in (EvictionResult.EVICTED, EvictionResult.NOT_FOUND):
                state.blocked.pop(attempt.pod.uid, None)
                continue
            blocked = state.blocked.setdefault(attempt.pod.uid, _Blocked())
            blocked.attempts += 1
            delay = backoff_seconds(blocked.attempts)
            if attempt.outcome.retry_after is not None:
                delay = max(delay, attempt.outcome.retry_after)
            blocked.not_before = mono + delay
            blocked.message = attempt.outcome.message
            blocked.result = attempt.outcome.result.value
        return results

    def _budgets(
        self, refused: Iterable[Pod]
    ) -> tuple[dict[str, list[PodDisruptionBudget]], str | None]:
        """The budgets of each namespace with a refused pod, and what went wrong reading them."""
        found: dict[str, list[PodDisruptionBudget]] = {}
        errors: list[str] = []
        for namespace in sorted({p.namespace for p in refused}):
            try:
                found[namespace] = self._client.list_pdbs(namespace)
            except (RemediatorError, ValueError, TypeError) as exc:
                # Info, not warning: this repeats every round; the facts carry it to on-call.
                log.info(
                    "drain: budgets of %s unreadable, keeping the 429 text: %s", namespace, exc
                )
                errors.append(str(exc))
        return found, "; ".join(errors) or None

    def _parallel(self, pods: list[Pod], act: Callable[[Pod], EvictionOutcome]) -> list[_Attempt]:
        if not pods:
            return []
        with ThreadPoolExecutor(max_workers=min(self._workers, len(pods))) as pool:
            return list(pool.map(lambda p: _Attempt(p, act(p)), pods))

    def _force(self, pod: Pod, grace_seconds: int | None) -> EvictionOutcome:
        try:
            self._client.delete_pod(pod.namespace, pod.name, grace_seconds, uid=pod.uid)
        except (NotFoundError, ConflictError):
            # Gone, or the name now belongs to a new incarnation: either way not ours to delete.
            return EvictionOutcome(EvictionResult.NOT_FOUND)
        except NotActing:
            raise  # leadership lapsed: the round stops here, the next leader redoes it
        except ApiUnavailable as exc:
            return EvictionOutcome(EvictionResult.API_UNAVAILABLE, str(exc), exc.delay)
        except RemediatorError as exc:
            return EvictionOutcome(EvictionResult.ERROR, str(exc))
        return EvictionOutcome(EvictionResult.EVICTED, "force-deleted after the drain timeout")

    # -- reporting ---------------------------------------------------------------------------

    def _facts(
        self,
        node: str,
        pods: list[Pod],
        plan: DrainPlan,
        attempts: Mapping[str, _Attempt],
        elapsed: float,
        budgets: Mapping[str, list[PodDisruptionBudget]],
    ) -> dict[str, Any]:
        """Per-pod progress for the timeline: who got SIGTERM when, who is blocked by what."""
        state = self._nodes.get(node, _NodeState())
        now = format_time(self._clock.now())
        progress: list[dict[str, Any]] = []
        for pod in (*plan.terminating, *plan.evict, *plan.backing_off):
            entry: dict[str, Any] = {"pod": pod.key, **eviction_facts(pod)}
            if pod.uses_empty_dir:
                entry["empty_dir"] = True  # its scratch data goes with it
            attempt = attempts.get(pod.uid)
            blocked = state.blocked.get(pod.uid)
            if pod.terminating and pod.sigterm_at is not None:
                entry.update(
                    state="terminating",
                    sigterm_at=format_time(pod.sigterm_at),
                    grace_seconds=pod.deletion_grace_seconds,
                )
                if attempt is not None and attempt.outcome.result is EvictionResult.EVICTED:
                    entry["force_deleted"] = True
            elif attempt is not None and attempt.outcome.result is EvictionResult.EVICTED:
                entry.update(state="evicted", sigterm_at=now, message=attempt.outcome.message)
            elif attempt is not None and attempt.outcome.result is EvictionResult.NOT_FOUND:
                entry.update(state="gone")
            elif blocked is not None:
                entry.update(
                    state="blocked",
                    reason=blocked.result,
                    message=blocked.message,
                    attempts=blocked.attempts,
                )
                holding = pdbs.blocking(pod, budgets.get(pod.namespace, ()))
                if blocked.result in _BUDGET_REFUSALS and holding:
                    # The budget's numbers first: the console shows `message` as the pod's note.
                    entry.update(
                        message="; ".join(pdbs.describe(b) for b in holding),
                        eviction_message=blocked.message,
                        budgets=[pdbs.facts(b) for b in holding],
                    )
            else:
                entry.update(state="pending")
            progress.append(entry)
        return {
            "node": node,
            "elapsed_seconds": round(elapsed, 3),
            "pods": progress,
            "skipped": [{"pod": key, "reason": reason} for key, reason in plan.skipped],
        }


def drain_until_done(
    drainer: Drainer,
    node: str,
    *,
    started_at: datetime,
    grace_seconds: int | None = DEFAULT_GRACE_SECONDS,
    timeout_seconds: float = 600.0,
    on_timeout: OnTimeout = OnTimeout.HOLD,
    sleep: Callable[[float], None] = time.sleep,
    on_round: Callable[[Outcome], None] | None = None,
) -> Outcome:
    """Round after round until the drain is done or held: a blocking drain for the CLI, tests
    and the benchmark (the engine instead schedules each round on its own tick)."""
    while True:
        outcome = drainer.drain(
            node,
            started_at=started_at,
            grace_seconds=grace_seconds,
            timeout_seconds=timeout_seconds,
            on_timeout=on_timeout,
        )
        if on_round is not None:
            on_round(outcome)
        if not isinstance(outcome, Waiting):
            return outcome
        sleep(outcome.retry_after)

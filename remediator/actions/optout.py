"""Opt-outs hold a node's remediation for a human: a recorded opt-out (who, why, until when; on
the node, a pod on it or a Slurm job on it), or the older pod label
`remediator.io/disable-auto-replace: "true"`, which has no owner and no expiry and is shown as
such with its age. A recorded opt-out that ran out protects nothing; the check says so, and its
expiry is audited once. A pod that is gone (or terminating) holds nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from remediator.actions.outcome import Done, Held, Outcome
from remediator.actions.pods import OPT_OUT_LABEL, opted_out
from remediator.kube.client import KubeClient
from remediator.model.optout import Scope, holding, label_hold
from remediator.store.optouts import OptOutBook


def recorded_hold(
    book: OptOutBook,
    now: datetime,
    actor: str,
    *,
    node: str,
    pods: Iterable[str] = (),
    jobs: Iterable[str] = (),
    own: bool = True,
) -> Done | Held:
    """The recorded opt-outs on `node` (unless not `own`: only on its pods or Slurm jobs):
    Held while one is active; Done otherwise, naming those that expired (each expiry is
    audited the first time)."""
    pods, jobs = list(pods), list(jobs)
    mine = node if own else None
    found = holding(book.concerning(mine, pods, jobs), now, node=mine, pods=pods, jobs=jobs)
    book.note_expired(found.expired, actor)
    facts: dict[str, Any] = {}
    expired = ""
    if found.expired:
        facts["expired_opt_outs"] = [r.id for r in found.expired]
        expired = "; ".join(
            f"opt-out #{r.id} on {r.scope.value.replace('_', ' ')} {r.target} by {r.actor} "
            f"expired at {r.until.isoformat(timespec='seconds')}: it no longer protects {node}"
            for r in found.expired
        )
    if found.active:
        facts["opt_outs"] = [r.id for r in found.active]
        facts["opt_out_pods"] = [r.target for r in found.active if r.scope is Scope.POD]
        reason = "; ".join(r.describe() for r in found.active)
        return Held(f"{reason}; {expired}" if expired else reason, facts)
    return Done(expired or f"no recorded opt-out concerns {node}", facts)


def recorded_jobs(
    book: OptOutBook, now: datetime, actor: str, node: str
) -> Callable[[Sequence[str]], Outcome]:
    """The Slurm side's question: do the opt-outs recorded for these jobs (on `node`) hold?"""
    return lambda jobs: recorded_hold(book, now, actor, node=node, jobs=jobs, own=False)


def check_opt_out(
    client: KubeClient,
    node: str,
    label: str = OPT_OUT_LABEL,
    value: str = "true",
    *,
    now: datetime | None = None,
    book: OptOutBook | None = None,
    actor: str = "",
) -> Outcome:
    """The pods' labels (each with its set time, given `now`) and, with a book, the recorded
    opt-outs on the node and its pods."""
    pods = client.list_pods_on_node(node)
    holders = opted_out(pods, label, value)
    recorded: Done | Held = Done("", {})
    if book is not None:
        live = [p.key for p in pods if not p.terminating and not p.finished]
        recorded = recorded_hold(book, now or book.clock.now(), actor, node=node, pods=live)
    reasons: list[str] = []
    facts: dict[str, Any] = {"node": node}
    if holders:
        names = sorted(p.key for p in holders)
        shown = ", ".join(names)
        if now is not None:
            holds = [label_hold(p.key, p.label_set_at.get(label), p.created_at) for p in holders]
            shown = "; ".join(h.describe() for h in sorted(holds, key=lambda h: h.pod))
            facts["label_since"] = {
                h.pod: {"since": h.since.isoformat() if h.since else None, "from": h.source}
                for h in holds
            }
        reasons.append(f"{len(names)} pod(s) on {node} carry {label}={value}: {shown}")
        facts.update({"pods": names, "label": label})
    facts.update(recorded.facts)
    if isinstance(recorded, Held):
        reasons.append(recorded.reason)
        facts["pods"] = sorted({*facts.get("pods", ()), *facts.pop("opt_out_pods", ())})
    facts.pop("opt_out_pods", None)
    told = recorded.detail if isinstance(recorded, Done) else ""
    if reasons:
        expired = told if recorded.facts else ""
        return Held("; ".join([*reasons, expired] if expired else reasons), facts)
    text = f"no pod on {node} opts out of automatic replacement"
    return Done(f"{text}; {told}" if told else text, facts)

"""Opt-out: a pod labelled `remediator.io/disable-auto-replace: "true"` holds its node's
remediation for a human; once it is gone (or terminating) the remediation may go on."""

from __future__ import annotations

from remediator.actions.outcome import Done, Held, Outcome
from remediator.actions.pods import OPT_OUT_LABEL, opted_out
from remediator.kube.client import KubeClient


def check_opt_out(
    client: KubeClient, node: str, label: str = OPT_OUT_LABEL, value: str = "true"
) -> Outcome:
    holders = opted_out(client.list_pods_on_node(node), label, value)
    if not holders:
        return Done(f"no pod on {node} opts out of automatic replacement", {"node": node})
    names = sorted(p.key for p in holders)
    return Held(
        f"{len(names)} pod(s) on {node} carry {label}={value}: {', '.join(names)}",
        {"node": node, "pods": names, "label": label},
    )

"""Uncordon: the node passed its repair and diagnostics, so it goes back into service. Only our
own quarantine is lifted (a cordon a human set before it stays, a taint not ours stays); a node
quarantined by another remediation is held, never released."""

from __future__ import annotations

from remediator.actions.outcome import Outcome
from remediator.actions.release import release
from remediator.kube.client import KubeClient


def uncordon(client: KubeClient, node: str, remediation_id: str) -> Outcome:
    return release(client, node, remediation_id)

"""Reboot: ask the node pool's provider to power-cycle the node (a privileged Job that reboots
the host where the provider cannot), then wait for the Node to be Ready with a new boot id.

Crash safety is the caller's order: the boot id is recorded on the timeline before the reboot is
asked for, and the request carries an idempotency key (the Job a fixed name), so a restart resumes
waiting for that boot id to change and asking again never reboots twice."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from remediator.actions.jobs import JobSettings, job_name, render_job
from remediator.actions.outcome import Done, Failed, Outcome, Waiting
from remediator.errors import NotFoundError
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node
from remediator.providers.base import NodePoolProvider, RebootUnsupported, trigger_maintenance

STEP = "reboot"
# Run in the host's namespaces (hostPID + nsenter into PID 1): systemd reboots the machine.
REBOOT_COMMAND = ["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "--", "systemctl", "reboot"]


def request_reboot(
    provider: NodePoolProvider,
    client: KubeClient,
    settings: JobSettings,
    *,
    pool: str | None,
    node: str,
    key: str,
    reason: str,
    remediation: str,
    attempt: int,
    maintenance: str | None = None,
) -> dict[str, Any]:
    """Ask for the reboot (idempotent by `key` / the Job's name); how it was asked for.
    `maintenance` (an announced event's code) starts that event through the provider instead:
    no Job can stand in for it, so the provider's refusal (MaintenanceUnsupported) stands."""
    if maintenance is not None:
        if pool is None:
            raise RebootUnsupported(f"node {node} belongs to no node pool: no cloud to ask")
        receipt = trigger_maintenance(provider, pool, node, maintenance, key, reason)
        return {"via": "maintenance", "reboot_id": receipt.id, "pool": pool, **receipt.detail}
    if pool is not None:
        try:
            receipt = provider.reboot(pool, node, key, reason)
            return {"via": "provider", "reboot_id": receipt.id, "pool": pool, **receipt.detail}
        except RebootUnsupported as exc:
            fallback = str(exc)
    else:
        fallback = f"node {node} belongs to no node pool"
    name = job_name(STEP, remediation, attempt)
    job = render_job(
        settings, name=name, node=node, step=STEP, remediation=remediation, command=REBOOT_COMMAND
    )
    client.create_job(settings.namespace, job)
    return {"via": "job", "job": name, "why_job": fallback}


def current_node(client: KubeClient, name: str) -> Node | None:
    try:
        return client.get_node(name)
    except NotFoundError:
        return None


def judge_reboot(
    node: Node | None,
    *,
    name: str,
    boot_id_before: str,
    started_at: datetime,
    now: datetime,
    timeout_seconds: float,
    poll_seconds: float = 2.0,
) -> Outcome:
    """Done once the node is Ready with a boot id other than the one recorded before asking."""
    if node is None:
        return Failed(f"node {name} is gone since the reboot was asked for", {"node": name})
    facts = {
        "node": name,
        "boot_id_before": boot_id_before,
        "boot_id": node.boot_id,
        "ready": node.ready,
    }
    rebooted = bool(node.boot_id) and node.boot_id != boot_id_before
    if rebooted and node.ready:
        return Done(f"{name} rebooted and is Ready (boot id {node.boot_id})", facts)
    if (now - started_at).total_seconds() > timeout_seconds:
        return Failed(
            f"{name} is not back Ready with a new boot id after {timeout_seconds:.0f}s", facts
        )
    waiting = "rebooted, waiting for Ready" if rebooted else "waiting for the reboot"
    return Waiting(f"{name}: {waiting}", poll_seconds, facts)

"""The node-pool provider, Slurm, the database and the node agents: each asked one read-only
question. The provider's write calls cannot be tried without acting, so they are named."""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, create_engine, select, text
from sqlalchemy.exc import SQLAlchemyError

from remediator.clock import utcnow
from remediator.doctor.context import DoctorContext, is_gpu_node
from remediator.doctor.report import Finding, Status
from remediator.errors import RemediatorError
from remediator.model import heartbeats
from remediator.settings import (
    AnyProviderSettings,
    AwsProviderSettings,
    ClusterApiProviderSettings,
    GceProviderSettings,
)
from remediator.store.db import SCHEMA_HEAD, normalise_url, schema_revision

# What each provider's replace and reboot calls need, beyond the read this doctor makes.
WRITES = {
    "http": "POST /v1/pools/{pool}/replacements, POST /v1/pools/{pool}/reboots",
    "aws": "autoscaling:TerminateInstanceInAutoScalingGroup, "
    "autoscaling:DescribeAutoScalingInstances, autoscaling:DescribeWarmPool, "
    "ec2:DescribeInstances, ec2:CreateTags, ec2:DeleteTags, ec2:RebootInstances",
    "gce": "compute.instanceGroupManagers.recreateInstances, compute.instanceGroupManagers."
    "listManagedInstances, compute.instances.reset, compute.zoneOperations.get",
    "clusterapi": "patch and delete machines, patch machinesets (checked under kubernetes)",
}
CAPI = "cluster.x-k8s.io/v1beta1"
SKEW_WARN = 2.0
SKEW_FAIL = 30.0


def _provider_for(ctx: DoctorContext, pool: str) -> AnyProviderSettings:
    return ctx.settings.pool_providers.get(pool, ctx.settings.provider)


def provider(ctx: DoctorContext) -> list[Finding]:
    try:
        pools = ctx.pools()
    except RemediatorError as exc:
        return [Finding("provider", "pools", Status.FAIL, f"cannot list nodes: {exc}", "")]
    if not pools:
        return [
            Finding(
                "provider",
                "pools",
                Status.FAIL,
                "no pools found, nothing to ask the provider about",
                "see the nodes check",
            )
        ]
    findings = []
    for pool in sorted(pools):
        chosen = _provider_for(ctx, pool)
        try:
            found = _read(ctx, pool, chosen, pools[pool])
        except Exception as exc:  # every SDK's own errors: the finding says which call
            findings.append(
                Finding(
                    "provider",
                    f"{chosen.type} pool {pool}",
                    Status.FAIL,
                    f"{type(exc).__name__}: {exc}",
                    _fix(chosen),
                )
            )
            continue
        findings.append(
            Finding(
                "provider",
                f"{chosen.type} pool {pool}",
                Status.PASS,
                f"{found}; replace/reboot also need (not tried: doctor never writes): "
                + WRITES[chosen.type].format(pool=pool),
            )
        )
    return findings


def _fix(chosen: AnyProviderSettings) -> str:
    if isinstance(chosen, AwsProviderSettings):
        return (
            "give the controller's IAM role (IRSA) autoscaling:DescribeAutoScalingGroups and the "
            "actions named in docs/providers.md; check `groups` maps the pool to its group"
        )
    if isinstance(chosen, GceProviderSettings):
        return (
            "give the controller's Google service account compute.instanceGroupManagers.get and "
            "the permissions in docs/providers.md; check `groups` maps the pool to ZONE/GROUP"
        )
    if isinstance(chosen, ClusterApiProviderSettings):
        return "apply deploy/components/clusterapi (Helm: clusterApi.rbac=true)"
    return "check provider.url and provider.token against your node-pool API"


def _read(ctx: DoctorContext, pool: str, chosen: AnyProviderSettings, members: list[Any]) -> str:
    timeout = ctx.timeout
    if isinstance(chosen, AwsProviderSettings):
        import boto3
        from botocore.config import Config

        keys = chosen.test_credentials
        session = boto3.session.Session(
            aws_access_key_id=keys.access_key_id if keys else None,
            aws_secret_access_key=keys.secret_access_key.get_secret_value() if keys else None,
        )
        config = Config(
            region_name=chosen.region,
            connect_timeout=min(timeout, 5.0),
            read_timeout=timeout,
            retries={"total_max_attempts": 1},
        )
        asg = session.client("autoscaling", endpoint_url=chosen.endpoint_url, config=config)
        group = chosen.groups.get(pool, pool)
        described = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])
        groups = described.get("AutoScalingGroups") or []
        if not groups:
            raise LookupError(f"DescribeAutoScalingGroups: no Auto Scaling group {group!r}")
        asg.describe_scaling_activities(AutoScalingGroupName=group, MaxRecords=1)
        found = groups[0]
        return (
            f"DescribeAutoScalingGroups {group}: {len(found.get('Instances') or ())} instances, "
            f"desired {found['DesiredCapacity']} of max {found['MaxSize']}; "
            "DescribeScalingActivities allowed"
        )
    if isinstance(chosen, GceProviderSettings):
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import compute_v1

        zone_group = chosen.groups.get(pool)
        if zone_group:
            zone, _, group = zone_group.partition("/")
        else:
            provider_id = next((n.provider_id for n in members if n.provider_id), "")
            parts = provider_id.removeprefix("gce://").split("/")
            if len(parts) != 3:
                raise LookupError(f"no groups entry for {pool} and no gce:// providerID to read")
            zone, group = parts[1], pool
        client = compute_v1.InstanceGroupManagersClient(
            credentials=AnonymousCredentials() if chosen.anonymous else None,
            client_options=(
                ClientOptions(api_endpoint=chosen.api_endpoint) if chosen.api_endpoint else None
            ),
            transport="rest",
        )
        manager = client.get(
            project=chosen.project, zone=zone, instance_group_manager=group, timeout=timeout
        )
        return (
            f"instanceGroupManagers.get {chosen.project}/{zone}/{group}: target size "
            f"{manager.target_size}"
        )
    if isinstance(chosen, ClusterApiProviderSettings):
        kube = ctx.kube.get()
        sets = kube.list_custom(CAPI, "machinesets")
        deployments = kube.list_custom(CAPI, "machinedeployments")
        names = {str((d.get("metadata") or {}).get("name")) for d in deployments}
        where = chosen.deployments.get(pool, pool).rpartition("/")[2]
        if where not in names:
            raise LookupError(
                f"{len(sets)} MachineSets readable, but no MachineDeployment {where!r} for pool "
                f"{pool}: set provider.deployments.{pool}"
            )
        return f"{len(sets)} MachineSets readable; MachineDeployment {where} found"
    headers = {"Authorization": f"Bearer {chosen.token.get_secret_value()}"} if chosen.token else {}
    response = httpx.get(
        f"{chosen.url.rstrip('/')}/v1/pools/{pool}/capacity", headers=headers, timeout=timeout
    )
    response.raise_for_status()
    spare = response.json().get("spare_capacity")
    return f"GET /v1/pools/{pool}/capacity: spare capacity {spare}"


def slurm(ctx: DoctorContext) -> list[Finding]:
    settings = ctx.settings.slurm
    if not settings.enabled:
        return [Finding("slurm", "configured", Status.SKIP, "slurm.enabled is false")]
    from remediator.slurm.client import SlurmCli
    from remediator.slurm.source import slurm_name

    cli = SlurmCli(settings)
    try:
        cli.ping()
        slurm_nodes = {n.name for n in cli.nodes()}
    except RemediatorError as exc:
        return [
            Finding(
                "slurm",
                "slurmctld answers",
                Status.FAIL,
                str(exc),
                "check slurm.slurm_conf, munge and that slurmctld is up (`scontrol ping`)",
            )
        ]
    findings = [
        Finding("slurm", "slurmctld answers", Status.PASS, f"{len(slurm_nodes)} Slurm nodes")
    ]
    try:
        gpu = [n for n in ctx.nodes.get() if is_gpu_node(n)]
    except RemediatorError as exc:
        findings.append(Finding("slurm", "node mapping", Status.FAIL, str(exc), ""))
        return findings
    mapped = {slurm_name(n, settings): n.name for n in gpu}
    unmapped = sorted(k for s, k in mapped.items() if s not in slurm_nodes)
    strays = sorted(slurm_nodes - set(mapped))
    if unmapped:
        findings.append(
            Finding(
                "slurm",
                "Kubernetes → Slurm",
                Status.FAIL,
                f"{len(unmapped)} GPU nodes map to no Slurm node: {', '.join(unmapped[:10])}",
                "set slurm.node_label or slurm.node_template so each node's Slurm name is right",
            )
        )
    else:
        findings.append(
            Finding("slurm", "Kubernetes → Slurm", Status.PASS, f"all {len(gpu)} GPU nodes map")
        )
    findings.append(
        Finding(
            "slurm",
            "Slurm → Kubernetes",
            Status.WARN if strays else Status.PASS,
            f"{len(strays)} Slurm nodes are no Kubernetes node: {', '.join(strays[:10])}"
            if strays
            else "every Slurm node is a Kubernetes node",
            "limit slurm.partition to the Kubernetes-run nodes" if strays else "",
        )
    )
    return findings


def read_only_engine(url: str, timeout: float) -> Engine:
    """The store opened so that nothing can be written: SQLite read-only (and never created),
    PostgreSQL with read-only transactions."""
    parsed = normalise_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = parsed.database or ""
        if path in ("", ":memory:"):
            raise RemediatorError("an in-memory SQLite database holds nothing to check")
        if not Path(path).exists():
            raise RemediatorError(f"{path} does not exist (run `remediator db upgrade`)")
        return create_engine(
            f"sqlite:///file:{path}?mode=ro&uri=true", connect_args={"timeout": timeout}
        )
    return create_engine(
        parsed,
        connect_args={
            "connect_timeout": max(1, int(timeout)),
            "options": "-c default_transaction_read_only=on",
        },
    )


def database(ctx: DoctorContext) -> list[Finding]:
    url = ctx.settings.database_url
    try:
        engine = read_only_engine(url, ctx.timeout)
    except RemediatorError as exc:
        return [Finding("database", "reachable", Status.FAIL, str(exc), "check database_url")]
    try:
        with engine.connect() as conn:
            before = utcnow()
            if engine.dialect.name == "postgresql":
                server = conn.execute(text("SELECT now()")).scalar_one()
            else:
                server = None
            after = utcnow()
            current = schema_revision(conn)
    except SQLAlchemyError as exc:
        return [
            Finding(
                "database",
                "reachable",
                Status.FAIL,
                f"{type(exc).__name__}: {str(exc).splitlines()[0]}",
                "check database_url, the password secret and that the database accepts "
                "connections from the controller",
            )
        ]
    finally:
        engine.dispose()
    findings = [Finding("database", "reachable", Status.PASS, f"{engine.dialect.name} answers")]
    head = SCHEMA_HEAD
    findings.append(
        Finding(
            "database",
            "migrations",
            Status.PASS if current == head else Status.FAIL,
            f"schema at {current or 'nothing'}, code expects {head}",
            ""
            if current == head
            else "run `remediator db upgrade` (the Deployment's migrate init container does)",
        )
    )
    if server is not None:
        midpoint = before + (after - before) / 2
        skew = abs((server - midpoint).total_seconds())
        status = (
            Status.FAIL if skew > SKEW_FAIL else Status.WARN if skew > SKEW_WARN else Status.PASS
        )
        findings.append(
            Finding(
                "database",
                "clock skew",
                status,
                f"database clock {skew:.1f}s from the controller's",
                ""
                if status is Status.PASS
                else "run NTP (chrony) on both; cooldowns and "
                "windows are compared across the two clocks",
            )
        )
    return findings


def agents(ctx: DoctorContext) -> list[Finding]:
    from remediator.store.models import AgentHeartbeat

    try:
        engine = read_only_engine(ctx.settings.database_url, ctx.timeout)
        with engine.connect() as conn:
            rows = conn.execute(
                select(AgentHeartbeat.version, AgentHeartbeat.seen_at).where(
                    AgentHeartbeat.cluster == ctx.settings.cluster_name
                )
            ).all()
        engine.dispose()
    except (RemediatorError, SQLAlchemyError) as exc:
        return [Finding("agents", "reporting", Status.FAIL, f"cannot read heartbeats: {exc}", "")]
    if not rows:
        return [
            Finding(
                "agents",
                "reporting",
                Status.SKIP,
                "no node agent has reported (optional: XIDs then come from DCGM alone)",
                "deploy the agent DaemonSet (docs/agent.md) to read XIDs from the kernel log",
            )
        ]
    now = utcnow()
    asked = heartbeats.asked_period(len(rows), ctx.settings.agents.heartbeat_budget_per_second)
    silent_after = timedelta(
        seconds=heartbeats.silent_after(ctx.settings.agent_silent_after_seconds, asked)
    )
    versions: dict[str, int] = {}
    silent = 0
    for version, seen_at in rows:
        versions[str(version)] = versions.get(str(version), 0) + 1
        if seen_at.tzinfo is None:
            seen_at = seen_at.replace(tzinfo=UTC)
        if now - seen_at > silent_after:
            silent += 1
    total = sum(versions.values())
    gpu: int | None
    try:
        gpu = sum(1 for n in ctx.nodes.get() if is_gpu_node(n))
    except RemediatorError:
        gpu = None  # the nodes check says why
    spread = ", ".join(f"{v}: {c}" for v, c in sorted(versions.items()))
    problems = []
    if silent:
        problems.append(f"{silent} silent for over {silent_after.total_seconds():.0f}s")
    if gpu and total < gpu:
        problems.append(f"{gpu - total} GPU nodes have no agent")
    if len(versions) > 1:
        problems.append("more than one version running")
    return [
        Finding(
            "agents",
            "reporting",
            Status.WARN if problems else Status.PASS,
            f"{total} agents of {gpu if gpu is not None else 'an unknown number of'} GPU nodes "
            f"({spread})" + ("; " + "; ".join(problems) if problems else ""),
            "check the DaemonSet's pods on those nodes and roll one version out"
            if problems
            else "",
        )
    ]

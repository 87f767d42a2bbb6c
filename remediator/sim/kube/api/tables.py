"""Server-side printing: the `meta.k8s.io/v1` Table that `kubectl get` asks for, with the columns
and cell formats of the real server's printers (pkg/printers/internalversion), so that kubectl's
output from the simulator reads like a real cluster's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from remediator.sim.kube.api.store import Obj

Column = tuple[str, str, int]  # name, type, priority (1 = only with -o wide)
Row = Callable[[Obj, datetime], list[Any]]


def human_duration(seconds: float) -> str:
    """apimachinery's duration.HumanDuration: the precision kubectl's AGE column uses."""
    if seconds < -1:
        return "<invalid>"
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rest = s % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    years = hours // (24 * 365)
    if years < 8:
        days = (hours // 24) % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{years}y"


def _parse(ts: str | None) -> datetime | None:
    if not ts:
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def _since(ts: str | None, now: datetime) -> str:
    when = _parse(ts)
    return "<unknown>" if when is None else human_duration((now - when).total_seconds())


def _age(obj: Obj, now: datetime) -> str:
    return _since(obj.get("metadata", {}).get("creationTimestamp"), now)


def _name(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def _dash_none(value: Any) -> Any:
    return "<none>" if value in (None, "") else value


def _node_row(node: Obj, now: datetime) -> list[Any]:
    status = node.get("status", {})
    ready = "Unknown"  # no Ready condition at all; an Unknown one prints NotReady, as kubectl's
    for cond in status.get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = "Ready" if cond.get("status") == "True" else "NotReady"
    states = [ready]
    if node.get("spec", {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    labels = node.get("metadata", {}).get("labels") or {}
    roles = sorted(
        {k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")}
        | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set())
    )
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    info = status.get("nodeInfo") or {}
    return [
        _name(node),
        ",".join(states),
        ",".join(r for r in roles if r) or "<none>",
        _age(node, now),
        info.get("kubeletVersion", ""),
        _dash_none(addresses.get("InternalIP")),
        _dash_none(addresses.get("ExternalIP")),
        _dash_none(info.get("osImage")),
        _dash_none(info.get("kernelVersion")),
        _dash_none(info.get("containerRuntimeVersion")),
    ]


def _pod_row(pod: Obj, now: datetime) -> list[Any]:
    spec, status = pod.get("spec", {}), pod.get("status", {})
    reason = status.get("reason") or status.get("phase") or ""
    restarts, ready, last_restart = 0, 0, None
    statuses = status.get("containerStatuses") or []
    for cs in statuses:
        restarts += int(cs.get("restartCount", 0))
        last = (cs.get("lastState") or {}).get("terminated") or {}
        if last.get("finishedAt") and (last_restart is None or last["finishedAt"] > last_restart):
            last_restart = last["finishedAt"]
        state = cs.get("state") or {}
        if state.get("waiting", {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif state.get("terminated"):
            term = state["terminated"]
            reason = term.get("reason") or (
                f"Signal:{term['signal']}"
                if term.get("signal")
                else f"ExitCode:{term.get('exitCode', 0)}"
            )
        elif cs.get("ready") and "running" in state:
            ready += 1
    if reason == "Completed" and any("running" in (cs.get("state") or {}) for cs in statuses):
        reason = "Running" if ready else "NotReady"
    if pod.get("metadata", {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    restart_cell = str(restarts)
    if restarts and last_restart:
        restart_cell = f"{restarts} ({_since(last_restart, now)} ago)"
    gates = spec.get("readinessGates") or []
    gate_cell = "<none>"
    if gates:
        true_conditions = {
            c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"
        }
        passed = sum(1 for g in gates if g.get("conditionType") in true_conditions)
        gate_cell = f"{passed}/{len(gates)}"
    return [
        _name(pod),
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        restart_cell,
        _age(pod, now),
        _dash_none(status.get("podIP")),
        _dash_none(spec.get("nodeName")),
        _dash_none(status.get("nominatedNodeName")),
        gate_cell,
    ]


def _event_row(ev: Obj, now: datetime) -> list[Any]:
    involved = ev.get("involvedObject") or {}
    source = ev.get("source") or {}
    src = source.get("component") or ev.get("reportingComponent") or ""
    if source.get("host"):
        src = f"{src}, {source['host']}"
    first = ev.get("firstTimestamp") or ev.get("eventTime")
    last = (
        (ev.get("series") or {}).get("lastObservedTime")
        or ev.get("lastTimestamp")
        or ev.get("eventTime")
    )
    count = (ev.get("series") or {}).get("count") or ev.get("count") or 1
    return [
        _since(last, now),
        ev.get("type", ""),
        ev.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        src,
        str(ev.get("message", "")).strip(),
        _since(first, now),
        count,
        _name(ev),
    ]


def _pdb_row(pdb: Obj, now: datetime) -> list[Any]:
    spec, status = pdb.get("spec", {}), pdb.get("status", {})
    return [
        _name(pdb),
        str(spec["minAvailable"]) if "minAvailable" in spec else "N/A",
        str(spec["maxUnavailable"]) if "maxUnavailable" in spec else "N/A",
        status.get("disruptionsAllowed", 0),
        _age(pdb, now),
    ]


def _selector(obj: Obj) -> str:
    sel = obj.get("spec", {}).get("selector") or {}
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for expr in sel.get("matchExpressions") or []:
        values = ",".join(expr.get("values") or [])
        op = {"In": "in", "NotIn": "notin"}.get(expr.get("operator", ""))
        if op:
            parts.append(f"{expr.get('key')} {op} ({values})")
        elif expr.get("operator") == "Exists":
            parts.append(str(expr.get("key")))
        else:
            parts.append(f"!{expr.get('key')}")
    return ",".join(parts) or "<none>"


def _containers(obj: Obj) -> tuple[str, str]:
    containers = obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []
    return (
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
    )


def _daemonset_row(ds: Obj, now: datetime) -> list[Any]:
    status = ds.get("status", {})
    node_selector = ds.get("spec", {}).get("template", {}).get("spec", {}).get("nodeSelector")
    names, images = _containers(ds)
    return [
        _name(ds),
        status.get("desiredNumberScheduled", 0),
        status.get("currentNumberScheduled", 0),
        status.get("numberReady", 0),
        status.get("updatedNumberScheduled", 0),
        status.get("numberAvailable", 0),
        ",".join(f"{k}={v}" for k, v in sorted((node_selector or {}).items())) or "<none>",
        _age(ds, now),
        names,
        images,
        _selector(ds),
    ]


def _replicaset_row(rs: Obj, now: datetime) -> list[Any]:
    status = rs.get("status", {})
    names, images = _containers(rs)
    return [
        _name(rs),
        rs.get("spec", {}).get("replicas", 1),
        status.get("replicas", 0),
        status.get("readyReplicas", 0),
        _age(rs, now),
        names,
        images,
        _selector(rs),
    ]


def _deployment_row(dep: Obj, now: datetime) -> list[Any]:
    status = dep.get("status", {})
    names, images = _containers(dep)
    return [
        _name(dep),
        f"{status.get('readyReplicas', 0)}/{dep.get('spec', {}).get('replicas', 1)}",
        status.get("updatedReplicas", 0),
        status.get("availableReplicas", 0),
        _age(dep, now),
        names,
        images,
        _selector(dep),
    ]


def _job_row(job: Obj, now: datetime) -> list[Any]:
    spec, status = job.get("spec", {}), job.get("status", {})
    conditions = {
        c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"
    }
    if "Complete" in conditions:
        state = "Complete"
    elif "Failed" in conditions:
        state = "Failed"
    elif spec.get("suspend"):
        state = "Suspended"
    else:
        state = "Running"
    completions = spec.get("completions")
    succeeded = status.get("succeeded", 0)
    start, end = _parse(status.get("startTime")), _parse(status.get("completionTime"))
    duration = "" if start is None else human_duration(((end or now) - start).total_seconds())
    names, images = _containers(job)
    return [
        _name(job),
        state,
        f"{succeeded}/{completions}" if completions is not None else f"{succeeded}/1 of 1",
        duration,
        _age(job, now),
        names,
        images,
        _selector(job),
    ]


def _namespace_row(ns: Obj, now: datetime) -> list[Any]:
    return [_name(ns), ns.get("status", {}).get("phase", "Active"), _age(ns, now)]


def _lease_row(lease: Obj, now: datetime) -> list[Any]:
    return [_name(lease), lease.get("spec", {}).get("holderIdentity", ""), _age(lease, now)]


def _default_row(obj: Obj, now: datetime) -> list[Any]:
    return [_name(obj), obj.get("metadata", {}).get("creationTimestamp", "")]


_NAME: Column = ("Name", "string", 0)
_AGE: Column = ("Age", "string", 0)
_WORKLOAD_WIDE: list[Column] = [
    ("Containers", "string", 1),
    ("Images", "string", 1),
    ("Selector", "string", 1),
]
PRINTERS: dict[str, tuple[list[Column], Row]] = {
    "nodes": (
        [
            _NAME,
            ("Status", "string", 0),
            ("Roles", "string", 0),
            _AGE,
            ("Version", "string", 0),
            ("Internal-IP", "string", 1),
            ("External-IP", "string", 1),
            ("OS-Image", "string", 1),
            ("Kernel-Version", "string", 1),
            ("Container-Runtime", "string", 1),
        ],
        _node_row,
    ),
    "pods": (
        [
            _NAME,
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            _AGE,
            ("IP", "string", 1),
            ("Node", "string", 1),
            ("Nominated Node", "string", 1),
            ("Readiness Gates", "string", 1),
        ],
        _pod_row,
    ),
    "events": (
        [
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Subobject", "string", 1),
            ("Source", "string", 1),
            ("Message", "string", 0),
            ("First Seen", "string", 1),
            ("Count", "string", 1),
            ("Name", "string", 1),
        ],
        _event_row,
    ),
    "policy/poddisruptionbudgets": (
        [
            _NAME,
            ("Min Available", "string", 0),
            ("Max Unavailable", "string", 0),
            ("Allowed Disruptions", "integer", 0),
            _AGE,
        ],
        _pdb_row,
    ),
    "apps/daemonsets": (
        [
            _NAME,
            ("Desired", "integer", 0),
            ("Current", "integer", 0),
            ("Ready", "integer", 0),
            ("Up-to-date", "integer", 0),
            ("Available", "integer", 0),
            ("Node Selector", "string", 0),
            _AGE,
            *_WORKLOAD_WIDE,
        ],
        _daemonset_row,
    ),
    "apps/replicasets": (
        [
            _NAME,
            ("Desired", "integer", 0),
            ("Current", "integer", 0),
            ("Ready", "integer", 0),
            _AGE,
            *_WORKLOAD_WIDE,
        ],
        _replicaset_row,
    ),
    "apps/deployments": (
        [
            _NAME,
            ("Ready", "string", 0),
            ("Up-to-date", "integer", 0),
            ("Available", "integer", 0),
            _AGE,
            *_WORKLOAD_WIDE,
        ],
        _deployment_row,
    ),
    "batch/jobs": (
        [
            _NAME,
            ("Status", "string", 0),
            ("Completions", "string", 0),
            ("Duration", "string", 0),
            _AGE,
            *_WORKLOAD_WIDE,
        ],
        _job_row,
    ),
    "namespaces": ([_NAME, ("Status", "string", 0), _AGE], _namespace_row),
    "coordination.k8s.io/leases": ([_NAME, ("Holder", "string", 0), _AGE], _lease_row),
}
_DEFAULT: tuple[list[Column], Row] = ([_NAME, ("Created At", "date", 0)], _default_row)


def column_definitions(resource: str) -> list[Obj]:
    columns, _ = PRINTERS.get(resource, _DEFAULT)
    return [
        {
            "name": name,
            "type": kind,
            "format": "name" if name == "Name" and priority == 0 else "",
            "description": "",
            "priority": priority,
        }
        for name, kind, priority in columns
    ]


def table_row(
    resource: str, obj: Obj, now: datetime, include: str, api_version: str, kind: str
) -> Obj:
    """One row; `include` is the request's includeObject (None, Metadata or Object)."""
    _, row = PRINTERS.get(resource, _DEFAULT)
    out: Obj = {"cells": row(obj, now)}
    if include == "Object":
        out["object"] = {"kind": kind, "apiVersion": api_version, **obj}
    elif include != "None":
        meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "managedFields"}
        out["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": meta,
        }
    return out

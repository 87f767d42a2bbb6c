"""Prometheus and Alertmanager: reachable; the series each loaded policy's kind is read from
exist, carry the labels the source maps them by (a node label, `gpu`, `UUID`), name nodes of this
cluster, and are fresh; Alertmanager routes alerts to the controller's receiver."""

from __future__ import annotations

import math
from typing import Any

import httpx
import yaml

from remediator.doctor.context import DoctorContext
from remediator.doctor.report import Finding, Status
from remediator.errors import PolicyError, RemediatorError
from remediator.policy.interest import interest_of
from remediator.signals.sources.prometheus import KIND_METRICS, PrometheusSourceConfig

PROM = "prometheus"
# The series a kind is read from, when it is not the KIND_METRICS one.
READ_FROM = {**KIND_METRICS, "gpu_missing": KIND_METRICS["thermal"]}
GPU_KINDS = {"xid", "thermal", "nvlink", "ecc", "row_remap", "gpu_missing"}
ENABLE = {
    "nvlink": "dcgm-exporter ships the NVLink error counters commented out: enable the "
    "DCGM_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL lines of its counters CSV (docs/signals.md)",
    "ecc": "enable the DCGM_FI_DEV_ECC_DBE_* lines of dcgm-exporter's counters CSV",
    "infiniband": "run node_exporter with --collector.infiniband on the GPU nodes and scrape it",
}


class Prometheus:
    def __init__(self, url: str, timeout: float) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(timeout=timeout)

    def query(self, promql: str) -> list[dict[str, Any]]:
        response = self._http.get(f"{self.url}/api/v1/query", params={"query": promql})
        response.raise_for_status()
        body = response.json()
        if body.get("status") != "success":
            raise ValueError(f"{promql}: {body.get('error', body)}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def number(self, promql: str) -> float | None:
        result = self.query(promql)
        values = [float(s["value"][1]) for s in result]
        values = [v for v in values if math.isfinite(v)]
        return max(values) if values else None

    def version(self) -> str:
        response = self._http.get(f"{self.url}/api/v1/status/buildinfo")
        response.raise_for_status()
        return str(response.json().get("data", {}).get("version", "?"))

    def close(self) -> None:
        self._http.close()


def prometheus(ctx: DoctorContext) -> list[Finding]:
    url = ctx.settings.prometheus_url
    if not url:
        return [
            Finding(
                PROM,
                "configured",
                Status.SKIP,
                "no prometheus_url: signals come from node conditions, agents and pushes only",
                "set prometheus_url to read DCGM and InfiniBand metrics",
            )
        ]
    client = Prometheus(url, ctx.timeout)
    try:
        return _prometheus(ctx, client)
    finally:
        client.close()


def _kinds(ctx: DoctorContext) -> set[str]:
    try:
        interest = interest_of(ctx.policies.get().policies)
    except PolicyError:
        return set(READ_FROM)
    wanted = {k.value for k in interest.kinds} if interest.kinds is not None else set(READ_FROM)
    return wanted & set(READ_FROM)


def _prometheus(ctx: DoctorContext, prom: Prometheus) -> list[Finding]:
    try:
        version = prom.version()
    except (httpx.HTTPError, ValueError) as exc:
        return [
            Finding(
                PROM,
                "reachable",
                Status.FAIL,
                f"GET {prom.url}/api/v1/status/buildinfo: {type(exc).__name__}: {exc}",
                "set prometheus_url to the Prometheus HTTP API the controller can reach "
                "(behind a proxy: the path prefix too, e.g. http://prometheus/prometheus)",
            )
        ]
    findings = [Finding(PROM, "reachable", Status.PASS, f"Prometheus {version} at {prom.url}")]
    source = PrometheusSourceConfig(
        url=prom.url, sample_max_age_seconds=ctx.settings.prometheus_sample_max_age_seconds
    )
    node_labels = list(source.node_labels)
    try:
        known = {n.name for n in ctx.nodes.get()}
    except RemediatorError:
        known = set()
    for kind in sorted(_kinds(ctx)):
        metric = READ_FROM[kind]
        findings.extend(_series(prom, kind, metric, node_labels, source, known))
    return findings


def _series(
    prom: Prometheus,
    kind: str,
    metric: str,
    node_labels: list[str],
    source: PrometheusSourceConfig,
    known: set[str],
) -> list[Finding]:
    check = f"{kind} series ({metric})"
    total = prom.number(f"count({metric})")
    if not total:
        return [
            Finding(
                PROM,
                check,
                Status.FAIL,
                f"no {metric} series: policies of kind {kind} would never fire",
                ENABLE.get(kind, "scrape NVIDIA dcgm-exporter (port 9400) on every GPU node"),
            )
        ]
    labels = node_labels + ([source.ib_node_label] if kind == "infiniband" else [])
    by_label = {label: prom.number(f'count({metric}{{{label}=~".+"}})') or 0.0 for label in labels}
    node_label = next((label for label in labels if by_label[label]), None)
    if node_label is None:
        return [
            Finding(
                PROM,
                check,
                Status.FAIL,
                f"{total:.0f} series, none with a {' or '.join(labels)} label: no reading can "
                "be tied to a node",
                f"keep dcgm-exporter's Hostname label (or relabel yours to {labels[0]}) — "
                "in a metric_relabel_configs or the exporter's own settings",
            )
        ]
    problems: list[str] = []
    fixes: list[str] = []
    if kind in GPU_KINDS:
        for label, fix in (
            ("gpu", "keep dcgm-exporter's gpu label (the GPU index)"),
            ("UUID", "keep dcgm-exporter's UUID label"),
        ):
            count = prom.number(f'count({metric}{{{label}=~".+"}})') or 0.0
            if count < total:
                problems.append(f"{total - count:.0f} of {total:.0f} series lack {label}")
                fixes.append(fix)
    named = {
        str((s.get("metric") or {}).get(node_label, ""))
        for s in prom.query(f"group by ({node_label}) ({metric})")
    }
    if known and not named & known:
        problems.append(
            f"its {node_label} values ({', '.join(sorted(named)[:3])}…) name no Kubernetes node"
        )
        fixes.append(
            f"make {node_label} the Kubernetes node name (dcgm-exporter: run it as a DaemonSet "
            "with NODE_NAME from spec.nodeName)"
        )
    age = prom.number(f"time() - max(timestamp({metric}))")
    freshness = ""
    if age is not None:
        freshness = f", newest sample {age:.0f}s old"
        if age > source.staleness_seconds:
            problems.append(
                f"stale: newest sample {age:.0f}s old (bound {source.staleness_seconds:.0f}s)"
            )
            fixes.append("the exporter or the scrape is down: check its target in Prometheus")
        elif age > source.sample_max_age_seconds:
            return [
                Finding(
                    PROM,
                    check,
                    Status.WARN,
                    f"{total:.0f} series by {node_label}{freshness}: older than "
                    f"prometheus_sample_max_age_seconds ({source.sample_max_age_seconds:.0f}s)",
                    "scrape the exporter more often (dcgm-exporter: 30 s) or raise the bound",
                )
            ]
    gpu_missing_uuid = [p for p in problems if p.endswith("lack UUID")]
    if problems:
        severe = [p for p in problems if p not in gpu_missing_uuid]
        return [
            Finding(
                PROM,
                check,
                Status.FAIL if severe else Status.WARN,
                f"{total:.0f} series by {node_label}{freshness}; " + "; ".join(problems),
                "; ".join(fixes),
            )
        ]
    return [Finding(PROM, check, Status.PASS, f"{total:.0f} series by {node_label}{freshness}")]


def _routes(route: dict[str, Any]) -> list[dict[str, Any]]:
    found = [route]
    for child in route.get("routes") or ():
        found.extend(_routes(child))
    return found


def alertmanager(ctx: DoctorContext) -> list[Finding]:
    signals = ctx.settings.signals
    if not signals.alertmanager_url:
        return [
            Finding(
                "alertmanager",
                "configured",
                Status.SKIP,
                "no signals.alertmanager_url: alerts reach the controller only if Alertmanager "
                "posts them (docs/alertmanager.md)",
                "set signals.alertmanager_url so a new leader reads the alerts already firing",
            )
        ]
    url = signals.alertmanager_url.rstrip("/")
    try:
        response = httpx.get(f"{url}/api/v2/status", timeout=ctx.timeout)
        response.raise_for_status()
        original = response.json()["config"]["original"]
        config = yaml.safe_load(original) or {}
    except (httpx.HTTPError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        return [
            Finding(
                "alertmanager",
                "reachable",
                Status.FAIL,
                f"GET {url}/api/v2/status: {type(exc).__name__}: {exc}",
                "set signals.alertmanager_url to Alertmanager's address as the controller sees it",
            )
        ]
    findings = [Finding("alertmanager", "reachable", Status.PASS, f"Alertmanager at {url}")]
    name = signals.alertmanager_receiver
    routes = [r for r in _routes(config.get("route") or {}) if r.get("receiver") == name]
    receivers = [r for r in config.get("receivers") or () if r.get("name") == name]
    hooks = [w for r in receivers for w in r.get("webhook_configs") or ()]
    if not routes or not hooks:
        missing = "no route sends to it" if not routes else "it has no webhook_configs"
        findings.append(
            Finding(
                "alertmanager",
                f"route to receiver {name!r}",
                Status.FAIL,
                f"receiver {name!r}: {missing}",
                "add the receiver and route of docs/alertmanager.md (webhook to the controller's "
                "/api/v1/alertmanager with a push token)",
            )
        )
        return findings
    bad = [
        str(w.get("url", ""))
        for w in hooks
        if not str(w.get("url", "")).rstrip("/").endswith("/api/v1/alertmanager")
    ]
    findings.append(
        Finding(
            "alertmanager",
            f"route to receiver {name!r}",
            Status.WARN if bad else Status.PASS,
            f"{len(routes)} routes to {name!r}"
            + (
                f"; webhook URL {', '.join(bad)} is not the controller's /api/v1/alertmanager"
                if bad
                else ""
            ),
            "point the webhook at http://CONTROLLER/api/v1/alertmanager" if bad else "",
        )
    )
    return findings

"""The files the demo writes before it starts anything: the controller's settings and, when
Prometheus runs, its scrape configuration. Pure builders; the supervisor writes them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remediator.settings import Settings

# The controller's cadence in the demo: a fault shows up within seconds, not a poll later.
POLL_SECONDS = 2.0
ADVANCE_SECONDS = 1.0
SCRAPE_INTERVAL = "2s"
PROMETHEUS_JOB = "dcgm-exporter"


@dataclass(frozen=True)
class ControllerInputs:
    kubeconfig: Path
    policies_dir: Path
    database_path: Path
    nodepool_url: str
    host: str
    port: int
    operator_token: str
    prometheus_url: str | None = None
    provider: dict[str, Any] | None = None  # the simulator's own `provider` object, if any
    slurm: dict[str, Any] | None = None  # the simulator's ready-file `slurm` object


def demo_provider(inputs: ControllerInputs) -> dict[str, Any]:
    """The simulator's own provider object (the HTTP contract when it names none); the providers
    that call a remote API get the demo's shorter timeout."""
    provider = dict(inputs.provider or {"type": "http", "url": inputs.nodepool_url})
    if provider.get("type", "http") in ("http", "aws", "gce"):
        provider["timeout_seconds"] = 5.0
    return provider


def controller_settings(inputs: ControllerInputs) -> dict[str, Any]:
    """The YAML `remediator run --config` reads; validated here against the real Settings so
    that a mistake fails before any process starts."""
    data: dict[str, Any] = {
        "cluster_name": "demo",
        "kubeconfig": str(inputs.kubeconfig),
        "prometheus_url": inputs.prometheus_url,
        "policies_dir": str(inputs.policies_dir),
        "database_url": f"sqlite:///{inputs.database_path}",
        "provider": demo_provider(inputs),
        "web": {
            "listen": f"{inputs.host}:{inputs.port}",
            "operator_tokens": [inputs.operator_token],
        },
        # One replica: there is nobody to elect against.
        "leader_election": {"enabled": False},
        "poll_interval_seconds": POLL_SECONDS,
        "advance_interval_seconds": ADVANCE_SECONDS,
        "log_format": "text",
    }
    if inputs.slurm is not None:
        data["slurm"] = dict(inputs.slurm)
    Settings(**data)
    return data


def prometheus_config(metrics_url: str) -> dict[str, Any]:
    """Scrape the simulator's exporter endpoint the way a cluster scrapes dcgm-exporter, only
    faster (every 2 s instead of 30 s)."""
    target = metrics_url.removeprefix("http://").rstrip("/")
    return {
        "global": {
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            "evaluation_interval": SCRAPE_INTERVAL,
        },
        "scrape_configs": [
            {
                "job_name": PROMETHEUS_JOB,
                "metrics_path": "/metrics",
                "static_configs": [{"targets": [target]}],
            }
        ],
    }

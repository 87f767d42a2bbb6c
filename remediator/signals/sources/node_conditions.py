"""Kubernetes node conditions (node-problem-detector style) → `node_condition` signals.

One LIST of nodes per cycle, never a call per node. A condition is abnormal when Ready is not
True (False or Unknown: the kubelet stopped reporting) or when any other condition is True
(MemoryPressure, a problem-detector condition such as KernelDeadlock or an XID condition).
Which types count is configurable. If the API server cannot be reached the source is down and
says so; it never reports an empty cluster as a healthy one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from pydantic import BaseModel, ConfigDict, Field

from remediator.errors import PermanentError
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.base import HealthTracker, SourceResult
from remediator.signals.xid import parse_kernel_line

READY = "Ready"


class NodeConditionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # None: every condition type counts; else only these (Ready included only if listed).
    condition_types: frozenset[str] | None = None
    ignore_types: frozenset[str] = frozenset()
    timeout_seconds: float = Field(default=10.0, gt=0)
    label_selector: str | None = None


def api_client_from_kubeconfig(path: Path | None) -> Any:
    """A kubernetes ApiClient from a kubeconfig file, or in-cluster when `path` is None."""
    try:
        if path is None:
            k8s_config.load_incluster_config()
            return k8s.ApiClient()
        return k8s_config.new_client_from_config(config_file=str(path))
    except (ConfigException, OSError) as exc:
        raise PermanentError(f"cannot load Kubernetes configuration: {exc}") from exc


def is_abnormal(condition_type: str, status: str) -> bool:
    if condition_type == READY:
        return status != "True"
    return status == "True"


def counts(condition_type: str, config: NodeConditionConfig) -> bool:
    if condition_type in config.ignore_types:
        return False
    return config.condition_types is None or condition_type in config.condition_types


def node_signals(
    nodes: Iterable[Mapping[str, Any]], config: NodeConditionConfig, source: str, now: datetime
) -> list[Signal]:
    """Pure: Node objects (as JSON) → one signal per abnormal, counted condition."""
    signals: list[Signal] = []
    for node in nodes:
        name = (node.get("metadata") or {}).get("name")
        if not name:
            continue
        for condition in (node.get("status") or {}).get("conditions") or ():
            ctype = str(condition.get("type", ""))
            status = str(condition.get("status", ""))
            if not ctype or not counts(ctype, config) or not is_abnormal(ctype, status):
                continue
            message = str(condition.get("message") or "")
            labels = {
                "type": ctype,
                "status": status,
                "reason": str(condition.get("reason") or ""),
                "message": message,
            }
            if condition.get("lastTransitionTime"):
                labels["last_transition_time"] = str(condition["lastTransitionTime"])
            kernel = parse_kernel_line(message)
            if kernel is not None:
                labels |= {"xid": str(kernel.code), "pci": kernel.pci}
            signals.append(
                Signal(
                    node=name,
                    kind=SignalKind.NODE_CONDITION,
                    source=source,
                    observed_at=now,
                    code=1,
                    labels=labels,
                )
            )
    return signals


class NodeConditionSource:
    def __init__(
        self, api_client: Any, config: NodeConditionConfig | None = None, name: str = "nodes"
    ) -> None:
        self.name = name
        self.config = config or NodeConditionConfig()
        self._api = k8s.CoreV1Api(api_client)
        self._health = HealthTracker(name)

    def poll(self, now: datetime) -> SourceResult:
        try:
            nodes = self._list_nodes()
        except _ListFailed as exc:
            return self._health.down(now, str(exc))
        signals = node_signals(nodes, self.config, self.name, now)
        return self._health.ok(now, tuple(signals), {"nodes": str(len(nodes))})

    def _list_nodes(self) -> list[Mapping[str, Any]]:
        # Raw JSON instead of the client's models: one LIST of a large fleet deserializes
        # several times faster, and we read only a few fields.
        timeout = self.config.timeout_seconds
        kwargs: dict[str, Any] = {"_preload_content": False, "_request_timeout": timeout}
        if self.config.label_selector:
            kwargs["label_selector"] = self.config.label_selector
        try:
            response: Any = self._api.list_node(**kwargs)
            body = json.loads(response.data)
        except ApiException as exc:
            raise _ListFailed(
                f"Kubernetes API refused LIST nodes: {exc.status} {exc.reason}"
            ) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _ListFailed(
                f"Kubernetes API unreachable: {type(exc).__name__}: {str(exc)[:300]}"
            ) from exc
        except ValueError as exc:
            raise _ListFailed(f"LIST nodes returned invalid JSON: {exc}") from exc
        items = body.get("items") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise _ListFailed("LIST nodes answer has no items list")
        return [item for item in items if isinstance(item, dict)]


class _ListFailed(Exception):
    pass

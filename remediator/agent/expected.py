"""How many GPUs this node should have: given on the command line, or read from its Node
object (the GPU feature discovery label `nvidia.com/gpu.count`, else `nvidia.com/gpu`
capacity) with the agent's own service-account token. Unknown is said, never guessed."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remediator.agent.http import HttpClient, TransportError

GPU_RESOURCE = "nvidia.com/gpu"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ExpectedUnknown(Exception):
    """The node's GPU count cannot be learned now; presence is not checked until it can."""


def gpus_of(node: dict[str, Any]) -> int:
    labels = (node.get("metadata") or {}).get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    raw = labels.get(GPU_COUNT_LABEL) or capacity.get(GPU_RESOURCE)
    if raw is None or not str(raw).isdigit():
        raise ExpectedUnknown(f"the Node has neither {GPU_COUNT_LABEL} nor {GPU_RESOURCE}")
    return int(raw)


@dataclass(frozen=True)
class KubeAccess:
    url: str
    token: str | None
    ca_file: str | None

    @classmethod
    def in_cluster(cls) -> KubeAccess | None:
        host, port = (
            os.environ.get("KUBERNETES_SERVICE_HOST"),
            os.environ.get("KUBERNETES_SERVICE_PORT"),
        )
        if not host or not port:
            return None
        token_file, ca = SERVICE_ACCOUNT / "token", SERVICE_ACCOUNT / "ca.crt"
        token = token_file.read_text().strip() if token_file.exists() else None
        return cls(f"https://{host}:{port}", token, str(ca) if ca.exists() else None)


def fetch_expected(access: KubeAccess, node: str, timeout: float = 5.0) -> int:
    headers = {"Authorization": f"Bearer {access.token}"} if access.token else {}
    client = HttpClient(access.url, headers=headers, timeout=timeout, ca_file=access.ca_file)
    try:
        response = client.get(f"/api/v1/nodes/{node}")
    except TransportError as exc:
        raise ExpectedUnknown(f"cannot reach the Kubernetes API: {exc}") from exc
    finally:
        client.close()
    if response.status != 200:
        raise ExpectedUnknown(f"GET node {node}: {response.status}")
    try:
        body = response.json()
    except ValueError as exc:
        raise ExpectedUnknown(f"GET node {node}: not JSON") from exc
    if not isinstance(body, dict):
        raise ExpectedUnknown(f"GET node {node}: not a Node object")
    return gpus_of(body)

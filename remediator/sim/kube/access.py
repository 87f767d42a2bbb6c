"""Direct HTTP access to the simulated API server as a kubeconfig the simulator wrote gives it:
the server URL, its bearer token and, with `--rbac` (TLS), the CA that signed the server's
certificate. For clients that speak the wire protocol themselves (the demo's scenario, tests,
benchmarks) instead of through kubectl or the kubernetes client, which read the same file."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path
from typing import Any

import httpx
import yaml


def kube_http(
    kubeconfig: Path, timeout: float | httpx.Timeout = 10.0, **options: Any
) -> httpx.Client:
    """An httpx client for the kubeconfig's first cluster and user (the simulator writes one of
    each): base URL, `Authorization: Bearer` and the CA to verify the server by."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    token = config["users"][0]["user"].get("token")
    ca = cluster.get("certificate-authority-data")
    verify: ssl.SSLContext | bool = (
        ssl.create_default_context(cadata=base64.b64decode(ca).decode()) if ca else True
    )
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(
        base_url=cluster["server"], headers=headers, verify=verify, timeout=timeout, **options
    )

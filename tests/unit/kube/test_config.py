"""Building a client: configuration problems are PermanentErrors, not process exits."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediator.errors import PermanentError
from remediator.kube.client import KubeClient
from remediator.kube.leader import LeaderElector


def test_in_cluster_outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(PermanentError, match="in-cluster config"):
        KubeClient.connect(None)


def test_missing_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(PermanentError, match="kubeconfig"):
        KubeClient.connect(tmp_path / "absent")


@pytest.mark.parametrize(
    "text", ["apiVersion: v1\nclusters: [\n", "just a string\n", "clusters: 3\n", "- a\n- b\n"]
)
def test_malformed_kubeconfig(tmp_path: Path, text: str) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(text)
    with pytest.raises(PermanentError, match=f"kubeconfig {config}"):
        KubeClient.connect(config)


def test_elector_rejects_inconsistent_timings(tmp_path: Path) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    with KubeClient.connect(config) as kube:
        with pytest.raises(ValueError, match=r"retry_period < renew_deadline < lease_duration"):
            LeaderElector(kube, namespace="ns", name="l", lease_duration=2, renew_deadline=3)
        elector = LeaderElector(kube, namespace="ns", name="l", identity="me")
        assert elector.identity == "me" and not elector.is_leader

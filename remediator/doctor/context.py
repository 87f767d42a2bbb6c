"""What several checks share, read once: the settings, a read-only Kubernetes client, the nodes,
the pools they form, the policy set. Checks run in parallel, so each is fetched under a lock."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from remediator.errors import PolicyError, RemediatorError
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.settings import Settings

T = TypeVar("T")


class Once(Generic[T]):
    """A value computed once on first use; its error, if any, is kept and raised each time."""

    def __init__(self, compute: Callable[[], T]) -> None:
        self._compute = compute
        self._lock = threading.Lock()
        self._done = False
        self._value: T | None = None
        self._error: Exception | None = None

    def get(self) -> T:
        with self._lock:
            if not self._done:
                try:
                    self._value = self._compute()
                except Exception as exc:
                    self._error = exc
                self._done = True
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def is_gpu_node(node: Node) -> bool:
    return bool(node.gpus)


@dataclass
class DoctorContext:
    settings: Settings
    timeout: float
    kube: Once[KubeClient] = field(init=False)
    nodes: Once[list[Node]] = field(init=False)
    policies: Once[PolicySet] = field(init=False)

    def __post_init__(self) -> None:
        self.kube = Once(lambda: KubeClient.connect(self.settings.kubeconfig, self.timeout))
        self.nodes = Once(lambda: self.kube.get().list_nodes())
        self.policies = Once(lambda: load_policy_dir(self.settings.policies_dir))

    def pools(self) -> dict[str, list[Node]]:
        """GPU nodes by the value of the configured pool label."""
        found: dict[str, list[Node]] = {}
        for node in self.nodes.get():
            pool = node.labels.get(self.settings.pool_label)
            if pool and is_gpu_node(node):
                found.setdefault(pool, []).append(node)
        return found

    def close(self) -> None:
        try:
            kube = self.kube.get()
        except (RemediatorError, PolicyError, OSError):
            return  # never connected: nothing to close
        kube.close()

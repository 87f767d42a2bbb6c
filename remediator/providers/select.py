"""One provider per node pool: `pool_providers` names the pools with their own, `provider` serves
the rest. The engine sees a single NodePoolProvider; operation ids of a pool's own provider are
prefixed `<pool>::` so that following one finds its way back (ids of the default provider stay as
they were, so records written before a pool got its own provider still resolve)."""

from __future__ import annotations

from collections.abc import Mapping

from remediator.kube.client import KubeClient
from remediator.providers.base import (
    NodePoolProvider,
    Operation,
    RebootReceipt,
    request_rack_operation,
    trigger_maintenance,
)
from remediator.settings import (
    AnyProviderSettings,
    AwsProviderSettings,
    ClusterApiProviderSettings,
    GceProviderSettings,
    Settings,
)

SEPARATOR = "::"


def build_provider(settings: AnyProviderSettings, kube: KubeClient) -> NodePoolProvider:
    """The provider for one `provider:` setting; SDKs are imported only when configured."""
    if isinstance(settings, AwsProviderSettings):
        from remediator.providers.aws import AwsAutoScalingProvider

        return AwsAutoScalingProvider.from_settings(settings, kube)
    if isinstance(settings, ClusterApiProviderSettings):
        from remediator.providers.clusterapi import ClusterApiProvider

        return ClusterApiProvider.from_settings(settings, kube)
    if isinstance(settings, GceProviderSettings):
        from remediator.providers.gce import GceProvider

        return GceProvider.from_settings(settings, kube)
    from remediator.providers.http import HttpNodePoolProvider

    return HttpNodePoolProvider.from_settings(settings)


class PoolProviders:
    def __init__(self, default: NodePoolProvider, pools: Mapping[str, NodePoolProvider]) -> None:
        self._default = default
        self._pools = dict(pools)

    @classmethod
    def from_settings(cls, settings: Settings, kube: KubeClient) -> PoolProviders:
        return cls(
            build_provider(settings.provider, kube),
            {pool: build_provider(p, kube) for pool, p in settings.pool_providers.items()},
        )

    def _for(self, pool: str) -> NodePoolProvider:
        return self._pools.get(pool, self._default)

    def _tag(self, pool: str, op: Operation) -> Operation:
        if pool not in self._pools:
            return op
        return Operation(
            id=f"{pool}{SEPARATOR}{op.id}",
            pool=pool,
            node=op.node,
            state=op.state,
            new_node=op.new_node,
            error=op.error,
            detail=op.detail,
        )

    def request_replacement(
        self, pool: str, node: str, idempotency_key: str, reason: str
    ) -> Operation:
        op = self._for(pool).request_replacement(pool, node, idempotency_key, reason)
        return self._tag(pool, op)

    def get_operation(self, op_id: str) -> Operation:
        pool, sep, inner = op_id.partition(SEPARATOR)
        if sep and pool in self._pools:
            return self._tag(pool, self._pools[pool].get_operation(inner))
        return self._default.get_operation(op_id)

    def spare_capacity(self, pool: str) -> int | None:
        return self._for(pool).spare_capacity(pool)

    def reboot(self, pool: str, node: str, idempotency_key: str, reason: str) -> RebootReceipt:
        return self._for(pool).reboot(pool, node, idempotency_key, reason)

    def trigger_maintenance(
        self, pool: str, node: str, event: str, idempotency_key: str, reason: str
    ) -> RebootReceipt:
        return trigger_maintenance(self._for(pool), pool, node, event, idempotency_key, reason)

    def request_rack_operation(
        self, pool: str, rack: str, action: str, idempotency_key: str, reason: str
    ) -> Operation:
        op = request_rack_operation(self._for(pool), pool, rack, action, idempotency_key, reason)
        return self._tag(pool, op)

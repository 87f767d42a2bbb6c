"""Which maintenance sources a controller polls: one per cloud account its node pools live in.

Derived from the provider settings (the default `provider` and each `pool_providers` entry), so
that a cluster on EC2 or Compute Engine sees its scheduled maintenance without another setting:
an AWS provider's region and endpoint give one `AwsMaintenanceSource`, a GCE provider's project
and endpoint one `GceMaintenanceSource` (two pools in one account share it). The HTTP contract
and Cluster API announce no maintenance.

Each cloud's source is imported only for a cluster on that cloud, as providers/select.py does:
google-cloud-compute alone was a third of every controller's start-up on a loaded machine.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from remediator.settings import AnyProviderSettings, AwsProviderSettings, GceProviderSettings
from remediator.signals.sources.base import Source

if TYPE_CHECKING:
    from remediator.signals.sources.aws_maintenance import NodeLister


def maintenance_sources(
    providers: Iterable[AnyProviderSettings], nodes: NodeLister
) -> list[Source]:
    sources: list[Source] = []
    seen: set[tuple[str, ...]] = set()
    for provider in providers:
        if isinstance(provider, AwsProviderSettings):
            key: tuple[str, ...] = ("aws", provider.region or "", provider.endpoint_url or "")
            if key not in seen:
                from remediator.signals.sources.aws_maintenance import AwsMaintenanceSource

                name = _named("aws-maintenance", sum(k[0] == "aws" for k in seen))
                sources.append(AwsMaintenanceSource.from_settings(provider, nodes, name=name))
        elif isinstance(provider, GceProviderSettings):
            key = ("gce", provider.project, provider.api_endpoint or "")
            if key not in seen:
                from remediator.signals.sources.gce_maintenance import GceMaintenanceSource

                name = _named("gce-maintenance", sum(k[0] == "gce" for k in seen))
                sources.append(GceMaintenanceSource.from_settings(provider, nodes, name=name))
        else:
            continue
        seen.add(key)
    return sources


def _named(base: str, index: int) -> str:
    return base if index == 0 else f"{base}-{index + 1}"

"""Compute Engine managed instance groups for `sim serve --cloud gce`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp

from remediator.sim.cloud.gce.maintenance import GceMaintenance, maintenance_routes
from remediator.sim.cloud.gce.service import PROJECT, ZONE, SimGce, build_gce_app
from remediator.sim.kube.controllers.cluster import SimCluster


@dataclass
class SimGceCloud:
    app: ASGIApp
    service: SimGce
    maintenance: GceMaintenance

    def provider(self, url: str) -> dict[str, Any]:
        """The controller's `provider:` setting for this endpoint: one MIG per pool."""
        groups = {pool: f"{ZONE}/{pool}" for pool in self.service.templates}
        return {
            "type": "gce",
            "project": PROJECT,
            "api_endpoint": url,
            "anonymous": True,
            "groups": groups,
        }


def start_gce(
    cluster: SimCluster,
    provision_delay: float,
    reboot: Callable[[str], None] | None = None,
) -> SimGceCloud:
    """`reboot` power-cycles a node by name: what instances.reset does to its VM."""
    service = SimGce(cluster, provision_delay, reboot=reboot)
    service.bootstrap()
    cluster.on_tick(service.tick)
    maintenance = GceMaintenance(service)
    app = build_gce_app(service, maintenance_routes(service, maintenance))
    return SimGceCloud(app, service, maintenance)

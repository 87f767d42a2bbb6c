"""Cluster API for `sim serve --cloud clusterapi`: MachineDeployments, MachineSets and Machines
served as CRDs by the simulated API server, and the MachineSet controller behind them."""

from __future__ import annotations

from typing import Any

from remediator.sim.cloud.clusterapi.controller import SimClusterApi
from remediator.sim.kube.controllers.cluster import SimCluster


def start_clusterapi(cluster: SimCluster, provision_delay: float) -> SimClusterApi:
    capi = SimClusterApi(cluster, provision_delay)
    capi.bootstrap()
    cluster.on_tick(capi.tick)
    return capi


def provider_setting() -> dict[str, Any]:
    """The controller's `provider:` setting: it reaches Cluster API through its kubeconfig."""
    return {"type": "clusterapi"}

"""Cluster API for `sim serve --cloud clusterapi`: MachineDeployments, MachineSets and Machines
served as CRDs by the simulated API server, and the MachineSet controller behind them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from remediator.sim.cloud.clusterapi.controller import REBOOT_ANNOTATION, SimClusterApi
from remediator.sim.kube.controllers.cluster import SimCluster


def start_clusterapi(
    cluster: SimCluster,
    provision_delay: float,
    reboot: Callable[[str], None] | None = None,
) -> SimClusterApi:
    """`reboot` power-cycles a node by name: what the infrastructure provider does for the
    reboot annotation."""
    capi = SimClusterApi(cluster, provision_delay, reboot=reboot)
    capi.bootstrap()
    cluster.on_tick(capi.tick)
    return capi


def provider_setting() -> dict[str, Any]:
    """The controller's `provider:` setting: it reaches Cluster API through its kubeconfig, and
    reboots through the simulated infrastructure provider's annotation."""
    return {"type": "clusterapi", "reboot_annotation": REBOOT_ANNOTATION}

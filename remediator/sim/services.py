"""The simulated cloud beside the simulated cluster: the node-pool API, the fleet's GPU and
InfiniBand telemetry, and fault injection, as three ASGI apps that `sim serve` puts on three
loopback ports. All three share one state, so a fault injected through one shows in the others."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from starlette.types import ASGIApp

from remediator.clock import Clock, SystemClock
from remediator.sim.cloud.nodepool import NodePoolService, build_nodepool_app
from remediator.sim.cloud.reboots import RebootService
from remediator.sim.faults.arrivals import ArrivalFaults
from remediator.sim.faults.inject import FaultInjector, build_inject_app
from remediator.sim.faults.racks import RackFaults
from remediator.sim.faults.repair import DEFAULT_REBOOT_SECONDS, FaultRepairs
from remediator.sim.kube.api.faults import KubeFaults
from remediator.sim.kube.controllers.cluster import SimCluster
from remediator.sim.node.hosts import SimHosts
from remediator.sim.node.programs import HostPrograms
from remediator.sim.rack import topology
from remediator.sim.rack.fabric import Fabric
from remediator.sim.rack.operations import RackOperations
from remediator.sim.rack.topology import Rack
from remediator.sim.telemetry.exporters import Telemetry, build_metrics_app
from remediator.sim.telemetry.nvlink import render_nvlink


@dataclass
class CloudApps:
    nodepool: ASGIApp  # the cloud node-pool REST API (contract in docs/nodepool-api.yaml)
    metrics: ASGIApp  # GET /metrics: DCGM exporter + node_exporter infiniband series
    inject: ASGIApp  # POST fault injection endpoints
    reboot: Callable[[str], None]  # power-cycle one node: what a cloud's reboot call does


def build_cloud_apps(
    cluster: SimCluster,
    provision_delay: float = 3.0,
    clock: Clock | None = None,
    node_root: Path | None = None,
    kube_faults: KubeFaults | None = None,
    reboot_seconds: float = DEFAULT_REBOOT_SECONDS,
    doa_rate: float = 0.0,
    program_time_scale: float = 1.0,
    racks: list[Rack] | None = None,
) -> CloudApps:
    """`clock` must be the one the cluster runs on (the system clock unless a test drives a
    FakeClock): telemetry and operations keep the cluster's time. With `node_root`, each node
    also gets a host directory (kernel log, driver files) that faults write into. `kube_faults`
    are the Kubernetes API's fault rules and request log, for the inject API. A reboot keeps a
    node NotReady for `reboot_seconds`. A fraction `doa_rate` of the nodes the clouds add
    arrive with a hardware fault (sim/faults/arrivals.py). The host programs' run times are
    multiplied by `program_time_scale` (sim/node/programs.py). With `racks` (NVL72), a replaced tray
    comes back at its slot, and their NVLink fabric (NVSwitch faults, per-link telemetry, Fabric
    Manager) is sim/rack/fabric.py's."""
    clock = clock or SystemClock()
    telemetry = Telemetry(cluster.store, clock)
    positions = topology.positions(racks) if racks else None
    fabric = Fabric(racks, clock.now) if racks else None
    nodepool = NodePoolService(
        cluster,
        clock,
        provision_delay,
        positions=positions,
        racks=RackOperations(cluster, fabric) if fabric else None,
    )
    cluster.on_tick(nodepool.advance)
    hosts = (
        SimHosts(node_root, cluster.store, hardware=telemetry.hardware)
        if node_root is not None
        else None
    )
    repairs = FaultRepairs(cluster, telemetry, reboot_seconds)

    def applied(fault: object) -> None:
        repairs.applied(fault)
        if hosts is not None:
            hosts.applied(fault)

    injector = FaultInjector(cluster, telemetry, nodepool, applied)
    if fabric is not None:
        fabric.on_change(telemetry.changed)
        telemetry.add_section(lambda states: render_nvlink(fabric, states))
        injector.racks = RackFaults(fabric, cluster, hosts)
    arrivals = ArrivalFaults(injector, doa_rate)
    injector.arrivals = arrivals
    cluster.on_node_added(arrivals.node_added)
    repairs.attach(injector)
    tray = fabric.tray if fabric else None
    cluster.set_program_runner(HostPrograms(repairs, tray, program_time_scale, clock).run)
    reboots = RebootService(nodepool, clock, repairs.reboot)
    return CloudApps(
        nodepool=build_nodepool_app(nodepool, reboots.handle),
        metrics=build_metrics_app(telemetry),
        inject=build_inject_app(injector, kube_faults or KubeFaults()),
        reboot=repairs.reboot,
    )

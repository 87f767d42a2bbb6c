"""Simulated node hosts: each node's kernel log and driver files, written as the real driver
would, named as the DCGM labels name the GPUs, and changed by injected faults."""

from __future__ import annotations

import os
from pathlib import Path

from remediator.agent.gpus import pci_key, scan_driver
from remediator.agent.kmsg import parse_record
from remediator.clock import FakeClock
from remediator.signals.xid import parse_kernel_line, parse_pci_uuid_line
from remediator.sim.cloud.nodepool import NodePoolService
from remediator.sim.faults.inject import FAULT, FaultInjector
from remediator.sim.faults.repair import FaultRepairs
from remediator.sim.kube.controllers.cluster import SimCluster
from remediator.sim.node import driver
from remediator.sim.node.hosts import SimHosts
from remediator.sim.telemetry.exporters import Telemetry, gpu_uuid, pci_bus_id


def records(hosts: SimHosts, node: str) -> list[str]:
    found = []
    for line in hosts.kmsg(node).read_text().splitlines():
        record = parse_record(line)
        assert record is not None, line
        found.append(record.message)
    return found


def test_hosts_boot_and_faults_write_what_the_driver_would(tmp_path: Path) -> None:
    clock = FakeClock()
    cluster = SimCluster(clock=clock)
    cluster.add_node("train-0", "train", 8)
    hosts = SimHosts(tmp_path, cluster.store)
    injector = FaultInjector(
        cluster, Telemetry(cluster.store, clock), NodePoolService(cluster, clock), hosts.applied
    )
    gpus = scan_driver(tmp_path / "train-0" / driver.GPUS_DIR)
    assert {g.index for g in gpus.values()} == set(range(8))
    attached = [parse_pci_uuid_line(m) for m in records(hosts, "train-0")]
    assert (pci_key(pci_bus_id(3)), gpu_uuid("train-0", 3)) in attached
    assert gpus[pci_key(pci_bus_id(3))].uuid == gpu_uuid("train-0", 3)

    injector.apply(FAULT.validate_python({"type": "xid", "node": "train-0", "gpu": 4, "code": 79}))
    injector.apply(FAULT.validate_python({"type": "xid", "node": "train-0", "gpu": 1, "code": 13}))
    xids = [x for x in map(parse_kernel_line, records(hosts, "train-0")) if x is not None]
    assert [(x.pci, x.code, x.pid is None) for x in xids] == [
        (pci_key(pci_bus_id(4)), 79, True),  # the Xid line, no process
        (pci_key(pci_bus_id(4)), 79, True),  # "GPU has fallen off the bus." without Xid
        (pci_key(pci_bus_id(1)), 13, False),  # an application fault names its process
    ]

    injector.apply(FAULT.validate_python({"type": "gpu_missing", "node": "train-0", "gpu": 6}))
    assert not driver.attached(tmp_path / "train-0", pci_bus_id(6))
    injector.apply(FAULT.validate_python({"type": "clear", "node": "train-0"}))
    assert driver.attached(tmp_path / "train-0", pci_bus_id(6))

    cluster.add_node("train-1", "train", 4)  # a node joining later boots too
    assert len(scan_driver(tmp_path / "train-1" / driver.GPUS_DIR)) == 4
    boot_id = tmp_path / "train-0" / "proc/sys/kernel/random/boot_id"
    first_boot = boot_id.read_text()

    # Re-created under the same name (an in-place replacement): a new boot, a fresh log.
    injector.apply(FAULT.validate_python({"type": "gpu_missing", "node": "train-0", "gpu": 2}))
    cluster.store.delete("nodes", "", "train-0")
    cluster.add_node("train-0", "train", 8)
    assert boot_id.read_text() != first_boot
    assert not [x for x in map(parse_kernel_line, records(hosts, "train-0")) if x is not None]
    assert len(scan_driver(tmp_path / "train-0" / driver.GPUS_DIR)) == 8


def test_a_reboot_is_a_new_boot_of_the_host(tmp_path: Path) -> None:
    """docs/agent.md: a new boot_id, and a new kmsg file numbered from 0 with the boot's lines;
    a GPU broken for good stays off the bus, one whose fault was transient attaches again."""
    clock = FakeClock()
    cluster = SimCluster(clock=clock)
    cluster.add_node("train-0", "train", 8)
    hosts = SimHosts(tmp_path, cluster.store)
    telemetry = Telemetry(cluster.store, clock)
    repairs = FaultRepairs(cluster, telemetry, reboot_seconds=5.0)

    def applied(fault: object) -> None:
        repairs.applied(fault)
        hosts.applied(fault)

    injector = FaultInjector(cluster, telemetry, NodePoolService(cluster, clock), applied)
    repairs.attach(injector)
    fault = {"type": "gpu_missing", "node": "train-0"}
    injector.apply(FAULT.validate_python({**fault, "gpu": 2, "persistent": True}))
    injector.apply(FAULT.validate_python({**fault, "gpu": 5, "persistent": False}))
    injector.apply(FAULT.validate_python({"type": "xid", "node": "train-0", "gpu": 4, "code": 79}))
    boot_id = tmp_path / "train-0" / "proc/sys/kernel/random/boot_id"
    first_boot = boot_id.read_text()
    with hosts.kmsg("train-0").open() as reader:  # an agent following the old boot's log
        repairs.reboot("train-0")
        clock.advance(6)
        cluster.tick()
        assert os.fstat(reader.fileno()).st_ino != hosts.kmsg("train-0").stat().st_ino
        assert "NVRM: Xid" in reader.read()  # the old boot's log, whole, to its end

    assert boot_id.read_text() != first_boot
    lines = hosts.kmsg("train-0").read_text().splitlines()
    parsed = [parse_record(line) for line in lines]
    assert [r.seq for r in parsed if r is not None] == list(range(len(lines)))
    messages = records(hosts, "train-0")
    assert messages[0].startswith("Linux version")
    assert not [x for x in map(parse_kernel_line, messages) if x is not None]
    attached = {found[0] for found in map(parse_pci_uuid_line, messages) if found is not None}
    assert attached == {pci_key(pci_bus_id(i)) for i in range(8) if i != 2}
    assert not driver.attached(tmp_path / "train-0", pci_bus_id(2))
    assert driver.attached(tmp_path / "train-0", pci_bus_id(5))

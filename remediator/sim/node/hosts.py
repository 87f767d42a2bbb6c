"""One host directory per simulated node: `<root>/<node>/dev/kmsg` (a file of kmsg records),
`proc/driver/nvidia/gpus/<pci>/information`, `proc/sys/kernel/random/boot_id` and
`sys/class/dmi/id/product_serial` (the machine's serial, see hardware.py) — the layout
the agent reads below its `--host-root`. A node joining the cluster boots (its GPUs attach and
say so in the log); so does a node that comes back from a reboot (its Node's bootID changed): a
new boot_id, a new kmsg file numbered from 0, the GPUs still on the bus attached again. Injected
faults write what the driver would write.

PCI addresses and UUIDs are the telemetry's, so the DCGM labels, the kernel log and the driver
files name each GPU the same way.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from remediator.sim.faults.inject import ClearFault, GpuMissingFault, VersionsFault, XidFault
from remediator.sim.kube.api.store import ObjectStore, WatchEvent
from remediator.sim.node import driver
from remediator.sim.node.hardware import Hardware, Profile
from remediator.sim.node.kernel_log import (
    KERN_ERR,
    KERN_INFO,
    KernelLog,
    attach_line,
    fallen_off_line,
    xid_line,
)
from remediator.sim.telemetry.exporters import (
    XID_OFF_BUS,
    node_gpu_count,
    node_model,
    pci_bus_id,
    xid_message,
)

KMSG = Path("dev/kmsg")
BOOT_ID = Path("proc/sys/kernel/random/boot_id")
DMI_SERIAL = Path("sys/class/dmi/id/product_serial")
# Faults a job's process triggers carry its pid and name; the others are the hardware's.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 69, 94})


def boot_id_of(node: dict[str, Any]) -> str:
    return str(((node.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")


class SimHosts:
    def __init__(
        self, root: Path, store: ObjectStore, seed: int = 0, hardware: Hardware | None = None
    ) -> None:
        self.root = root
        self._hardware = hardware or Hardware()
        self._lock = threading.Lock()
        self._logs: dict[str, KernelLog] = {}
        self._models: dict[str, tuple[Profile, int]] = {}
        self._boots: dict[str, str] = {}  # node → its Node's status.nodeInfo.bootID
        self._rng = random.Random(seed)
        root.mkdir(parents=True, exist_ok=True)
        nodes, version = store.list("nodes")
        for node in nodes:
            self._boot(node)
        store.subscribe("nodes", self._on_node, since=version)

    def host_root(self, node: str) -> Path:
        return self.root / node

    def kmsg(self, node: str) -> Path:
        return self.host_root(node) / KMSG

    def write_kernel(self, node: str, message: str, priority: int) -> bool:
        """A kernel log record on `node` (a line another part of the machine logs, such as an
        NVSwitch's SXid); False when the node has no host."""
        with self._lock:
            log = self._logs.get(node)
        if log is None:
            return False
        log.write(message, priority)
        return True

    def _on_node(self, event: WatchEvent) -> None:
        if event.type == "ADDED":
            self._boot(event.object)
        elif event.type == "MODIFIED":
            name = (event.object.get("metadata") or {}).get("name", "")
            with self._lock:
                known = self._boots.get(name)
            if known is not None and known != boot_id_of(event.object):
                self._reboot(name, boot_id_of(event.object))
        elif event.type == "DELETED":
            name = (event.object.get("metadata") or {}).get("name", "")
            with self._lock:
                self._logs.pop(name, None)  # a node re-created under this name boots afresh

    def _boot(self, node: dict[str, Any]) -> None:
        meta = node.get("metadata") or {}
        name = meta.get("name", "")
        gpus, model = node_gpu_count(node), node_model(node)
        profile = self._hardware.profile(name, meta.get("uid", ""), model, gpus)
        with self._lock:
            if not name or name in self._logs:
                return
            self._boots[name] = boot_id_of(node)
            host = self.host_root(name)
            (host / DMI_SERIAL).parent.mkdir(parents=True, exist_ok=True)
            (host / DMI_SERIAL).write_text(f"{profile.machine_serial}\n")
        self._start(name, profile, range(gpus))

    def _reboot(self, name: str, boot_id: str) -> None:
        """The same machine boots again: a GPU off the bus for good stays off (a transient one
        was cleared by the reboot before the host came back)."""
        with self._lock:
            self._boots[name] = boot_id
            profile, gpus = self._models[name]
        profile = self._hardware.current(name) or profile
        host = self.host_root(name)
        on_bus = [i for i in range(gpus) if driver.attached(host, profile.gpu(i).pci_bus_id)]
        self._start(name, profile, on_bus)

    def _start(self, name: str, profile: Profile, on_bus: Iterable[int]) -> None:
        with self._lock:
            host = self.host_root(name)
            (host / BOOT_ID).parent.mkdir(parents=True, exist_ok=True)
            (host / BOOT_ID).write_text(f"{uuid.uuid4()}\n")
            # A new boot: a new ring buffer (a new file, so a reader of the old one sees it end)
            # and the driver attaches the GPUs again.
            (host / KMSG).unlink(missing_ok=True)
            driver.detach_all(host)
            log = KernelLog(host / KMSG)
            self._logs[name] = log
            self._models[name] = (profile, len(profile.gpus))
        log.write(f"Linux version 6.8.0-sim ({name})", KERN_INFO)
        driver_line = f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {profile.driver_version}"
        log.write(driver_line, KERN_INFO)
        for index in on_bus:
            self._attach(name, index)

    def _attach(self, node: str, index: int) -> None:
        profile, _ = self._models[node]
        gpu = profile.gpu(index)
        address, gpu_id = gpu.pci_bus_id, gpu.uuid
        driver.attach(
            self.host_root(node), profile.model, gpu_id, address, index, profile.vbios_version
        )
        self._logs[node].write(attach_line(address, gpu_id), KERN_INFO)

    def applied(self, fault: object) -> None:
        """Called by the fault injector after a fault took effect."""
        node = getattr(fault, "node", "")
        if node not in self._logs:
            return
        log = self._logs[node]
        if isinstance(fault, XidFault):
            address = pci_bus_id(fault.gpu)
            hardware = fault.code not in APPLICATION_XIDS
            pid = None if hardware else self._rng.randint(1000, 99999)
            log.write(xid_line(address, fault.code, xid_message(fault.code), pid, "python"))
            if fault.code == XID_OFF_BUS:
                log.write(fallen_off_line(address), KERN_ERR)
        elif isinstance(fault, GpuMissingFault):
            driver.detach(self.host_root(node), pci_bus_id(fault.gpu))
        elif isinstance(fault, ClearFault):
            if fault.gpu is None:
                self._reflash(node)
            _, gpus = self._models[node]
            for index in range(gpus) if fault.gpu is None else (fault.gpu,):
                if not driver.attached(self.host_root(node), pci_bus_id(index)):
                    self._attach(node, index)
        elif isinstance(fault, VersionsFault):
            self._reflash(node)

    def _reflash(self, node: str) -> None:
        """The machine's VBIOS changed (or was restored): the driver's files say so."""
        profile = self._hardware.current(node)
        if profile is None:
            return
        with self._lock:
            self._models[node] = (profile, len(profile.gpus))
        host = self.host_root(node)
        for gpu in profile.gpus:
            if driver.attached(host, gpu.pci_bus_id):
                driver.attach(
                    host, profile.model, gpu.uuid, gpu.pci_bus_id, gpu.index, profile.vbios_version
                )

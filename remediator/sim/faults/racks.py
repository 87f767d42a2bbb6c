"""Faults of a whole NVL72 rack, injected like the node faults (`POST /v1/faults`):

- `{"type": "sxid", "rack": r, "switch": k, "code": C, "fatal": true}`: NVSwitch tray k of rack
  r reports SXid C. Every compute tray of the rack logs the driver's SXid lines (each tray's
  agent reports them; remediation must fold them into one), Fabric Manager logs the error, and a
  fatal one takes the switch tray's NVLinks down and stops Fabric Manager (sim/rack/fabric.py).
- `{"type": "rack_power", "rack": r}`: the rack loses power: its 18 trays go NotReady together
  (their kubelets stop posting status) until a clear.
- `{"type": "clear", "rack": r}`: power back (each tray boots afresh) and the switch faults gone.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from remediator.sim.node.kernel_log import KERN_ERR, KERN_WARNING
from remediator.sim.rack.fabric import FM_LOG, Fabric, SxidEvent, fm_stamp


class _RackFault(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rack: int = Field(ge=0, le=10_000)


class SxidFault(_RackFault):
    type: Literal["sxid"]
    switch: int = Field(ge=0)
    code: int = Field(ge=1, le=99_999)
    fatal: bool = False


class RackPowerFault(_RackFault):
    type: Literal["rack_power"]


class RackClearFault(_RackFault):
    type: Literal["clear"]


RackFault = Annotated[SxidFault | RackPowerFault | RackClearFault, Field(discriminator="type")]
RACK_FAULT = TypeAdapter(RackFault)


def is_rack_fault(raw: object) -> bool:
    """A fault body that names a rack, not a node."""
    return isinstance(raw, dict) and "rack" in raw and "node" not in raw


class RackCluster(Protocol):
    def set_node_condition(
        self, node: str, type: str, status: str, reason: str = "", message: str = ""
    ) -> None: ...

    def reboot_node(self, name: str, down_seconds: float) -> None: ...


class KernelLogs(Protocol):
    def write_kernel(self, node: str, message: str, priority: int) -> bool: ...

    def host_root(self, node: str) -> Path: ...


class RackFaults:
    def __init__(
        self, fabric: Fabric, cluster: RackCluster, hosts: KernelLogs | None = None
    ) -> None:
        self.fabric = fabric
        self._cluster = cluster
        self._hosts = hosts
        self._tids = itertools.count(2817)

    def apply(self, fault: RackFault) -> str:
        """Carry out one rack fault; ValueError for a rack or switch that does not exist."""
        trays = self.fabric.trays(fault.rack)
        if isinstance(fault, SxidFault):
            event = self.fabric.sxid(fault.rack, fault.switch, fault.code, fault.fatal)
            self._log_sxid(trays, event)
            kind = "fatal" if fault.fatal else "non-fatal"
            return (
                f"{kind} SXid {fault.code} on NVSwitch tray {fault.switch} of rack {fault.rack} "
                f"(nvidia-nvswitch{event.chip}), logged on its {len(trays)} compute trays"
                + ("; its NVLinks are down and Fabric Manager stopped" if fault.fatal else "")
            )
        if isinstance(fault, RackPowerFault):
            self.fabric.set_power(fault.rack, False)
            for tray in trays:
                self._cluster.set_node_condition(
                    tray,
                    "Ready",
                    "Unknown",
                    "NodeStatusUnknown",
                    "Kubelet stopped posting node status.",
                )
            return f"rack {fault.rack} lost power: its {len(trays)} trays are NotReady"
        was_off = not self.fabric.powered(fault.rack)
        self.fabric.repair(fault.rack)
        if was_off:
            for tray in trays:
                self._cluster.reboot_node(tray, 0.0)
        self._log_fabric_manager(
            trays,
            "[INFO]",
            "Successfully configured all the available NVSwitches to route GPU NVLink traffic",
        )
        return f"cleared rack {fault.rack}" + ("; power is back" if was_off else "")

    def _log_sxid(self, trays: list[str], event: SxidEvent) -> None:
        if self._hosts is None:
            return
        priority = KERN_ERR if event.fatal else KERN_WARNING
        tid = next(self._tids)
        for tray in trays:
            for line in event.kernel_lines():
                self._hosts.write_kernel(tray, line, priority)
            self._append(tray, event.fabric_manager_line(tid))
            if event.fatal:
                self._append(
                    tray,
                    f"{fm_stamp(event.at)} [ERROR] [tid {tid}] fatal NVSwitch error: "
                    "Fabric Manager is exiting, NVLink peer access is disabled",
                )

    def _log_fabric_manager(self, trays: list[str], level: str, text: str) -> None:
        if self._hosts is None:
            return
        tid = next(self._tids)
        stamp = fm_stamp(self.fabric.now())
        for tray in trays:
            self._append(tray, f"{stamp} {level} [tid {tid}] {text}")

    def _append(self, tray: str, line: str) -> None:
        assert self._hosts is not None
        path = self._hosts.host_root(tray) / FM_LOG
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

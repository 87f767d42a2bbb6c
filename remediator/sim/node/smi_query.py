"""`nvidia-smi -q` on a simulated node: the report's header and, per GPU, the identity fields,
"Platform Info" (an NVL72 tray's chassis serial, slot and tray index) and the "Fabric" section
(State, Status, CliqueId, ClusterUUID, Health) in the driver's layout and wording. Only these
sections: the rest of the real report (clocks, power, ECC…) is left out, so a parser of it sees
fewer sections, never different ones. A node that is no NVL72 tray prints N/A where a GPU without
a fabric does."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from remediator.sim.node.hardware import Profile

if TYPE_CHECKING:
    from remediator.sim.rack.fabric import TrayFabric

WIDTH = 38  # the column where " : " starts, counted from the section's indent


def _row(indent: int, name: str, value: str) -> str:
    return f"{' ' * indent}{name:<{WIDTH + 4 - indent}}: {value}"


def report(
    profile: Profile,
    present: Sequence[int],
    fabric: TrayFabric | None,
    now: float | None = None,
) -> str:
    stamp = time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now))
    lines = [
        "",
        "==============NVSMI LOG==============",
        "",
        _row(0, "Timestamp", stamp),
        _row(0, "Driver Version", profile.driver_version),
        _row(0, "CUDA Version", profile.cuda_version),
        "",
        _row(0, "Attached GPUs", str(len(present))),
    ]
    for shown, index in enumerate(present):
        gpu = profile.gpu(index)
        lines += [
            f"GPU {gpu.pci_bus_id}",
            _row(4, "Product Name", profile.model),
            _row(4, "Product Architecture", "Blackwell" if "GB200" in profile.model else "Hopper"),
            _row(4, "Persistence Mode", "Enabled"),
            _row(4, "Serial Number", gpu.serial),
            _row(4, "GPU UUID", gpu.uuid),
            _row(4, "Minor Number", str(shown)),
            _row(4, "VBIOS Version", profile.vbios_version),
            _row(4, "MultiGPU Board", "No"),
            "    Platform Info",
        ]
        if fabric is None:
            platform = [("Chassis Serial Number", "N/A"), ("Slot Number", "N/A")]
            platform += [("Tray Index", "N/A"), ("Host ID", "N/A"), ("Peer Type", "N/A")]
            platform += [("Module Id", "1"), ("GPU Fabric GUID", "N/A")]
        else:
            guid = f"0x{abs(hash((fabric.cluster_uuid, fabric.slot, index))) % (1 << 64):016x}"
            platform = [
                ("Chassis Serial Number", fabric.rack.chassis_serial),
                ("Slot Number", str(fabric.slot)),
                ("Tray Index", str(fabric.slot)),
                ("Host ID", "1"),
                ("Peer Type", "Switch Connected"),
                ("Module Id", str(index + 1)),
                ("GPU Fabric GUID", guid),
            ]
        lines += [_row(8, name, value) for name, value in platform]
        lines += [
            "    PCI",
            _row(8, "Bus Id", gpu.pci_bus_id),
            _row(8, "Device Id", f"0x{profile.spec.device_id}10DE"),
            "    Fabric",
        ]
        if fabric is None:
            rows = [("State", "N/A"), ("Status", "N/A"), ("CliqueId", "N/A")]
            rows += [("ClusterUUID", "N/A")]
            health = ["N/A"] * 4
        else:
            rows = [
                ("State", "Completed"),
                ("Status", "Success" if fabric.fm_active else "Failure"),
                ("CliqueId", str(fabric.clique)),
                ("ClusterUUID", fabric.cluster_uuid),
            ]
            bandwidth = "Full" if not fabric.links_down else "Degraded"
            unhealthy = "False" if fabric.healthy else "True"
            health = [bandwidth, "False", unhealthy, "False"]
        lines += [_row(8, name, value) for name, value in rows]
        lines.append("        Health")
        names = (
            "Bandwidth",
            "Route Recovery in progress",
            "Route Unhealthy",
            "Access Timeout Recovery",
        )
        lines += [_row(12, name, value) for name, value in zip(names, health, strict=True)]
    return "".join(line + "\n" for line in lines)

"""Hardware identity from what the real systems report: the Node's providerID (and GKE's
instance-id annotation), nvidia-smi's CSV and the DMI serial (the driver's
/proc/driver/nvidia/gpus/*/information is parsed by the agent, agent/gpus.py). Pure parsing:
the agent and the intake read the inputs."""

from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# GKE writes the Compute Engine instance id on its Nodes. GCE's providerID names the instance
# (gce://project/zone/name), so an instance recreated under the same name keeps the providerID
# but not this id.
GCE_INSTANCE_ID = "container.googleapis.com/instance_id"
# Machine ids go in URLs (/api/v1/machines/{id}): whatever is not of these becomes `_`.
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")
MACHINE_ID = r"^[A-Za-z0-9_.:-]{1,256}$"
# What a vendor writes in the DMI serial when it has none: not an identity.
NO_SERIAL = frozenset(
    {"", "0", "none", "n/a", "na", "not specified", "to be filled by o.e.m.", "default string"}
)


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """One GPU as a node reports it. `pci_bus_id` is normalised (see `pci`)."""

    uuid: str
    pci_bus_id: str | None = None
    index: int | None = None
    serial: str | None = None
    model: str | None = None
    vbios: str | None = None
    driver: str | None = None


@functools.lru_cache(maxsize=4096)  # a fleet has a few dozen distinct spellings; cycles repeat them
def pci(bus_id: str | None) -> str | None:
    """`0000:18:00`, the key the agent and the kernel log use: nvidia-smi and DCGM write
    `00000000:18:00.0`, the driver `0000:18:00.0`, NVRM `PCI:0000:18:00`; one slot for all."""
    if not bus_id:
        return None
    parts = bus_id.strip().lower().removeprefix("pci:").split(":")
    if len(parts) == 2:  # no domain
        parts = ["0", *parts]
    if len(parts) != 3:
        return None
    domain, bus, rest = parts
    try:
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(rest.partition('.')[0], 16):02x}"
    except ValueError:
        return None


def _known(value: str | None) -> str | None:
    """None for the driver's and nvidia-smi's ways of saying "unknown"."""
    if value is None:
        return None
    value = value.strip()
    if not value or value.startswith("??") or value in {"N/A", "[N/A]", "[Not Supported]"}:
        return None
    return value


SMI_QUERY = "serial,uuid,pci.bus_id,vbios_version,driver_version"


def parse_smi_csv(text: str) -> list[GpuIdentity]:
    """`nvidia-smi --query-gpu=serial,uuid,pci.bus_id,vbios_version,driver_version
    --format=csv`: a header line, then one line per GPU, fields separated by `, `; columns found
    by the header's names, so an older query's CSV reads too. Rows without a UUID are skipped."""
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    if not rows:
        return []
    header = [h.strip() for h in rows[0]]
    found: list[GpuIdentity] = []
    for row in rows[1:]:
        if len(row) != len(header):
            continue
        fields = dict(zip(header, (v.strip() for v in row), strict=True))
        uuid = _known(fields.get("uuid"))
        if uuid is None:
            continue
        found.append(
            GpuIdentity(
                uuid=uuid,
                pci_bus_id=pci(fields.get("pci.bus_id")),
                serial=_known(fields.get("serial")),
                vbios=_known(fields.get("vbios_version")),
                driver=_known(fields.get("driver_version")),
            )
        )
    return found


def dmi_serial(text: str | None) -> str | None:
    """The content of /sys/class/dmi/id/product_serial, or None when it names no machine."""
    if text is None:
        return None
    value = text.strip()
    return None if value.lower() in NO_SERIAL else value


def machine_id(
    provider_id: str, annotations: Mapping[str, str], serial: str | None = None
) -> str | None:
    """The machine as hardware (see `rank`): the cloud's instance id; else the DMI serial when
    the agent read one (bare metal: the providerID of Metal3 or a static name outlives a board
    swap); else the providerID. None when nothing tells two machines under one name apart (GCE
    without the instance-id annotation and no serial)."""
    if (cloud := _cloud_id(provider_id, annotations)) is not None:
        return cloud
    if serial:
        return "dmi:" + _UNSAFE.sub("_", serial)
    if provider_id.startswith(("gce://", "aws://")):
        return None
    # Any other providerID (Cluster API's, Metal3's) as a path-safe id: the API takes it in a URL.
    return (
        _UNSAFE.sub("_", provider_id.replace(":///", ":").replace("://", ":").replace("/", ":"))
        or None
    )


def _cloud_id(provider_id: str, annotations: Mapping[str, str]) -> str | None:
    if provider_id.startswith("gce://"):
        instance = annotations.get(GCE_INSTANCE_ID)
        return f"gce:{instance}" if instance else None
    if provider_id.startswith("aws://"):
        instance = provider_id.rsplit("/", 1)[-1]
        return f"aws:{instance}" if instance.startswith("i-") else None
    return None


def rank(machine: str | None) -> int:
    """Which of two ids seen for one node names its machine. A cloud's instance id (2) is the
    machine on a cloud, as the issue's operators count it (a VM's DMI serial is its hypervisor's
    name for the same instance); on bare metal the agent's DMI serial (1) outranks a providerID
    (0), which outlives a board swap."""
    if machine is None:
        return -1
    if machine.startswith(("aws:", "gce:")):
        return 2
    return DMI_RANK if machine.startswith("dmi:") else 0


DMI_RANK = 1

# A machine the controller's own replacement brought under a name whose providerID outlives its
# trays (the node-pool API keeps a slot's name and providerID; Metal3's, Cluster API's): the
# providerID's id, this mark, the remediation and which of its replacements (`brought_by`).
BROUGHT_MARK = "::replacement-"


def lineage(machine: str) -> str:
    """The id the Node's providerID gives, for a machine `brought_by` a replacement; any other
    machine is its own."""
    return machine.split(BROUGHT_MARK, 1)[0]


def brought_by(machine: str, remediation_id: int, replacement: int) -> str:
    """The machine the `replacement`th replacement of remediation `remediation_id` brought under
    the name `machine` (a providerID's id) stood for: new hardware the providerID cannot tell
    from its predecessor, known as new because the controller itself asked for it."""
    return f"{lineage(machine)}{BROUGHT_MARK}{remediation_id}.{replacement}"


def behind(known: str | None, own: str | None) -> str | None:
    """The machine behind a node from what the ledger knows of it (`known`) and what its Node
    says (`own`, `machine_id`): the ledger's when it is a machine a replacement brought under
    this providerID (the Node cannot tell it from the tray before), else the higher-ranked one,
    the Node's on a tie (a recreated instance's Node is fresher)."""
    if known is not None and own is not None and lineage(known) == own:
        return known
    return own if rank(own) >= rank(known) else known


@dataclass(frozen=True, slots=True)
class HostHardware:
    """What a node's agent reads of its host (agent/identity.py): the machine's DMI serial and
    its GPUs. Sent whole on the agent's first heartbeat, then only as its `digest`."""

    dmi_serial: str | None
    gpus: tuple[GpuIdentity, ...] = ()

    @property
    def machine(self) -> str | None:
        return machine_id("", {}, self.dmi_serial) if self.dmi_serial else None

    def wire(self) -> dict[str, Any]:
        """The heartbeat's `hardware` object; fields nothing read are left out."""
        gpus = [
            {k: v for k, v in _gpu_fields(g).items() if v is not None}
            for g in sorted(self.gpus, key=lambda g: (g.uuid, g.pci_bus_id or ""))
        ]
        found: dict[str, Any] = {"gpus": gpus}
        if self.dmi_serial:
            found["dmi_serial"] = self.dmi_serial
        return found

    @property
    def digest(self) -> str:
        """16 hex digits over the canonical `wire()`: the agent's and the controller's the same
        for the same hardware, whatever order the GPUs were read in."""
        text = json.dumps(self.wire(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_LENGTH]


DIGEST_LENGTH = 16
DIGEST_PATTERN = r"^[0-9a-f]{16}$"


def _gpu_fields(gpu: GpuIdentity) -> dict[str, Any]:
    return {
        "uuid": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "index": gpu.index,
        "serial": gpu.serial,
        "model": gpu.model,
        "vbios": gpu.vbios,
        "driver": gpu.driver,
    }

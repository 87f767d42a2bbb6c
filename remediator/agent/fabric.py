"""What the agent reads of the NVLink fabric on a rack-scale tray (GB200/GB300 NVL72): each GPU's
fabric registration from `nvidia-smi -q` (its "Fabric" section: State, Status, CliqueId,
ClusterUUID, Health), and Fabric Manager's state from `systemctl is-active nvidia-fabricmanager`
and its log. Pure parsers; the runner runs the commands and reads the file.

The ClusterUUID is the NVLink domain and the CliqueId the clique inside it (the same pair GPU
feature discovery writes into the `nvidia.com/gpu.clique` label), so the agent can tell the
controller which domain an SXid on this tray belongs to even where the label is missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FABRIC_MANAGER_UNIT = "nvidia-fabricmanager"
# What `nvidia-smi -q` prints for a field it has no value for.
_NO_VALUE = {"N/A", "Not Supported", "", "[N/A]"}


_GPU = re.compile(r"^GPU (?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")


@dataclass(frozen=True, slots=True)
class GpuFabric:
    """One GPU's fabric registration. `registered` is the state the fabric works in."""

    pci: str
    state: str | None
    status: str | None
    clique_id: int | None
    cluster_uuid: str | None
    bandwidth: str | None

    @property
    def registered(self) -> bool:
        return self.state == "Completed" and self.status == "Success"


def _key_value(line: str) -> tuple[int, str, str] | None:
    key, colon, value = line.partition(":")
    if not colon:
        return None
    indent = len(key) - len(key.lstrip(" "))
    return indent, key.strip(), value.strip()


def _value(raw: str | None) -> str | None:
    return None if raw is None or raw in _NO_VALUE else raw


def parse_fabric(output: str) -> list[GpuFabric]:
    """Each GPU's Fabric section of `nvidia-smi -q`; GPUs without one (no NVLink fabric, older
    drivers) are left out. A CliqueId that is no integer is kept as unknown (None)."""
    gpus: list[GpuFabric] = []
    pci: str | None = None
    section: dict[str, str] | None = None
    section_indent = 0

    def close() -> None:
        nonlocal section
        if section is not None and pci is not None:
            clique = _value(section.get("CliqueId"))
            gpus.append(
                GpuFabric(
                    pci=pci,
                    state=_value(section.get("State")),
                    status=_value(section.get("Status")),
                    clique_id=int(clique) if clique is not None and clique.isdigit() else None,
                    cluster_uuid=_value(section.get("ClusterUUID")),
                    bandwidth=_value(section.get("Bandwidth")),
                )
            )
        section = None

    for line in output.splitlines():
        gpu = re.match(
            r"^GPU (?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$", line
        )
        if gpu is not None:
            close()
            bus = gpu["pci"].lower()
            pci = bus[-12:-2] if len(bus) > 12 else bus[:-2]  # `DDDD:BB:DD` as the kernel prints
            continue
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if stripped == "Fabric":
            close()
            section, section_indent = {}, indent
            continue
        if section is None:
            continue
        if stripped and indent <= section_indent:
            close()
            continue
        found = _key_value(line)
        if found is not None:
            section.setdefault(found[1], found[2])
    close()
    return gpus


@dataclass(frozen=True, slots=True)
class FabricManagerState:
    """`systemctl is-active nvidia-fabricmanager`: `active`, or why not (`inactive`, `failed`,
    `activating`, …). `present` is False when the unit does not exist on this machine (no
    NVSwitch here: nothing to report)."""

    state: str
    present: bool

    @property
    def healthy(self) -> bool:
        return not self.present or self.state == "active"


def parse_is_active(output: str, exit_code: int, stderr: str = "") -> FabricManagerState:
    state = output.strip().splitlines()[0].strip() if output.strip() else "unknown"
    # systemctl says `inactive` (exit 3) both for a stopped unit and for one that does not
    # exist; only `systemctl` itself tells them apart on stderr or with exit 4.
    missing = exit_code == 4 or "could not be found" in stderr or "not-found" in output
    return FabricManagerState(state, not missing)


@dataclass(frozen=True, slots=True)
class FabricManagerLine:
    level: str
    message: str


# [Dec 02 2026 07:00:00] [ERROR] [tid 1234] detected NVSwitch fatal error 20034 on ...
_FM_LINE = re.compile(
    r"^\[(?P<when>[^\]]+)\]\s*\[(?P<level>[A-Z]+)\]\s*(?:\[tid \d+\]\s*)?(?P<message>.*?)\s*$"
)
_FM_REPORTED = {"ERROR", "FATAL", "CRITICAL"}


def parse_fabric_manager_line(line: str) -> FabricManagerLine | None:
    """A Fabric Manager log line worth a signal (its errors); None for the rest (its banner,
    configuration dump and INFO lines)."""
    match = _FM_LINE.match(line)
    if match is None or match["level"] not in _FM_REPORTED:
        return None
    return FabricManagerLine(match["level"], match["message"])

"""The GPUs the driver knows: `/proc/driver/nvidia/gpus/<pci>/information`, and presence.

The driver makes one directory per GPU it attached, named by the PCI address, with lines such
as `GPU UUID:  GPU-…`, `Bus Location:  0000:18:00.0` and `Device Minor:  0` (the N of
/dev/nvidiaN, which the agent reports as the GPU index). A GPU that vanished from the PCI bus
is gone from this list after the next driver load; the PCI bus itself is checked through
sysfs (vendor 0x10de, class 0x03xxxx).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NVIDIA_VENDOR = "0x10de"
DISPLAY_CLASS = "0x03"


@dataclass(frozen=True, slots=True)
class GpuInfo:
    pci: str  # DDDD:BB:DD, as the kernel log prints it
    index: int | None
    uuid: str | None
    model: str | None = None


def pci_key(address: str) -> str:
    """`00000000:18:00.0` (DCGM), `0000:18:00.0` (sysfs) or `0000:18:00` (NVRM) → `0000:18:00`."""
    address = address.strip().lower()
    domain, _, rest = address.partition(":")
    bus_device = rest.partition(".")[0]
    return f"{domain[-4:]:0>4}:{bus_device}"


def parse_information(text: str, fallback_pci: str) -> GpuInfo:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    minor = fields.get("Device Minor", "")
    uuid = fields.get("GPU UUID", "")
    return GpuInfo(
        pci=pci_key(fields.get("Bus Location") or fallback_pci),
        index=int(minor) if minor.isdigit() else None,
        uuid=uuid if uuid.startswith("GPU-") else None,
        model=fields.get("Model") or None,
    )


def scan_driver(gpus_dir: Path) -> dict[str, GpuInfo]:
    """Every GPU the driver lists, by PCI key; an unreadable entry is skipped (it is going)."""
    found: dict[str, GpuInfo] = {}
    try:
        entries = sorted(gpus_dir.iterdir())
    except OSError:
        return found
    for entry in entries:
        try:
            text = (entry / "information").read_text(errors="replace")
        except OSError:
            continue
        info = parse_information(text, entry.name)
        found[info.pci] = info
    return found


def count_pci_gpus(pci_devices: Path) -> int | None:
    """NVIDIA display/3D controllers on the PCI bus; None when sysfs cannot be read."""
    try:
        entries = list(pci_devices.iterdir())
    except OSError:
        return None
    count = 0
    for entry in entries:
        try:
            vendor = (entry / "vendor").read_text().strip()
            klass = (entry / "class").read_text().strip()
        except OSError:
            continue
        if vendor == NVIDIA_VENDOR and klass.startswith(DISPLAY_CLASS):
            count += 1
    return count


def missing_gpus(
    expected: int, present: dict[str, GpuInfo], on_bus: int | None
) -> list[int | None]:
    """GPU indices the node should have but the driver does not list. A shortfall that cannot
    be pinned to an index (entries without a minor number, or fewer NVIDIA devices on the PCI
    bus than the driver still lists) is one `None`: a GPU is gone, which one is unknown."""
    indices = {g.index for g in present.values() if g.index is not None}
    missing: list[int | None] = [i for i in range(expected) if i not in indices]
    if len(indices) < len(present):
        short = max(0, expected - len(present))
        missing = [None] if short else []
    if on_bus is not None and expected - on_bus > len(missing):
        missing.append(None)
    return missing

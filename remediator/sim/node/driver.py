"""The NVIDIA driver's per-GPU `/proc/driver/nvidia/gpus/<pci>/information` files."""

from __future__ import annotations

import shutil
from pathlib import Path

GPUS_DIR = Path("proc/driver/nvidia/gpus")
VBIOS = "96.00.99.00.01"  # an HGX H100's, when the caller has no hardware profile


def proc_dir_name(pci_bus_id: str) -> str:
    """DCGM's `00000000:18:00.0` → the driver's directory name `0000:18:00.0`."""
    return pci_bus_id.lower()[-12:]


def information(model: str, uuid: str, pci_bus_id: str, minor: int, vbios: str = VBIOS) -> str:
    """The file as the 5xx drivers print it (tab-aligned `Key: value` lines)."""
    return (
        f"Model: \t\t {model}\n"
        f"IRQ:   \t\t {200 + minor}\n"
        f"GPU UUID: \t {uuid}\n"
        f"Video BIOS: \t {vbios}\n"
        "Bus Type: \t PCIe\n"
        "DMA Size: \t 52 bits\n"
        "DMA Mask: \t 0xfffffffffffff\n"
        f"Bus Location: \t {proc_dir_name(pci_bus_id)}\n"
        f"Device Minor: \t {minor}\n"
        "GPU Excluded:\t No\n"
    )


def attach(
    host_root: Path, model: str, uuid: str, pci_bus_id: str, minor: int, vbios: str = VBIOS
) -> None:
    entry = host_root / GPUS_DIR / proc_dir_name(pci_bus_id)
    entry.mkdir(parents=True, exist_ok=True)
    tmp = entry / ".information.tmp"
    tmp.write_text(information(model, uuid, pci_bus_id, minor, vbios))
    tmp.replace(entry / "information")


def detach(host_root: Path, pci_bus_id: str) -> None:
    shutil.rmtree(host_root / GPUS_DIR / proc_dir_name(pci_bus_id), ignore_errors=True)


def detach_all(host_root: Path) -> None:
    shutil.rmtree(host_root / GPUS_DIR, ignore_errors=True)


def attached(host_root: Path, pci_bus_id: str) -> bool:
    return (host_root / GPUS_DIR / proc_dir_name(pci_bus_id) / "information").exists()

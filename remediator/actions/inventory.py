"""A node's hardware and software inventory, read from the programs' own output:
`nvidia-smi --query-gpu=… --format=csv` (GPUs, driver, VBIOS), the header of plain `nvidia-smi`
(CUDA version) and `ibstat` (InfiniBand ports). Pure parsers: output that is not the expected
format raises InventoryUnreadable, so a check built on it fails instead of passing."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GPU_FIELDS = (
    "index",
    "name",
    "uuid",
    "serial",
    "pci.bus_id",
    "driver_version",
    "vbios_version",
    "memory.total",
)
CUDA = re.compile(r"CUDA Version:\s*([0-9][0-9.]*)")
DRIVER = re.compile(r"Driver Version:\s*([0-9][0-9.]*)")
CA = re.compile(r"^CA '([^']+)'")
PORT = re.compile(r"^\s+Port (\d+):")
KEY = re.compile(r"^\s+([A-Za-z][A-Za-z ]*):\s*(.*)$")


class InventoryUnreadable(ValueError):
    """A program's output is not in the format it prints."""


def query_gpu_command() -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv"]


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str
    serial: str
    pci_bus_id: str
    driver: str
    vbios: str
    memory_mib: int | None


@dataclass(frozen=True)
class IbPort:
    ca: str
    port: int
    state: str
    rate: int | None
    link_layer: str = ""


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[Gpu, ...]
    cuda: str | None = None
    ib_ports: tuple[IbPort, ...] = ()

    @property
    def summary(self) -> dict[str, Any]:
        """What a pool's nodes are compared on (serials and UUIDs are each machine's own)."""
        models = sorted({g.name for g in self.gpus})
        drivers = sorted({g.driver for g in self.gpus})
        vbios = sorted({g.vbios for g in self.gpus})
        ib = self.infiniband
        return {
            "gpu_count": len(self.gpus),
            "gpu_model": models[0] if len(models) == 1 else ", ".join(models),
            "driver": drivers[0] if len(drivers) == 1 else ", ".join(drivers),
            "vbios": vbios[0] if len(vbios) == 1 else ", ".join(vbios),
            "cuda": self.cuda,
            "ib_ports": len(ib),
            "ib_active": sum(1 for p in ib if p.state == "Active"),
            "ib_rate": self.ib_rate,
        }

    @property
    def infiniband(self) -> tuple[IbPort, ...]:
        """The InfiniBand ports (a RoCE/Ethernet port of the same HCAs is not the fabric)."""
        return tuple(p for p in self.ib_ports if p.link_layer in ("", "InfiniBand"))

    @property
    def ib_rate(self) -> int | None:
        """The node's InfiniBand rate: that of its fastest Active port, so one slow port is named
        against the others (off_rate_ports) instead of leaving the node without a rate."""
        rates = [p.rate for p in self.infiniband if p.state == "Active" and p.rate is not None]
        return max(rates, default=None)

    def off_rate_ports(self, expected: int | None) -> tuple[IbPort, ...]:
        """The Active InfiniBand ports not at `expected` Gb/s (the pool's baseline, else the
        node's own rate, when it is the slower ports that show): a link that trained down to a
        lower rate is still Active, and only its rate tells."""
        want = self.ib_rate if expected is None else expected
        if want is None:
            return ()
        return tuple(p for p in self.infiniband if p.state == "Active" and p.rate != want)

    def identity(self) -> list[dict[str, Any]]:
        """Each GPU as the hardware ledger records it (ledger/inventory.py)."""
        return [
            {
                "index": g.index,
                "uuid": g.uuid,
                "serial": g.serial,
                "pci_bus_id": g.pci_bus_id,
                "model": g.name,
                "vbios": g.vbios,
                "driver": g.driver,
            }
            for g in self.gpus
        ]


def _memory(text: str) -> int | None:
    match = re.match(r"\s*(\d+)\s*MiB", text)
    return int(match.group(1)) if match else None


def parse_query_gpu(output: str) -> tuple[Gpu, ...]:
    """The CSV of `--query-gpu` with its header (`--format=csv`) or without (`csv,noheader`),
    columns in GPU_FIELDS order."""
    lines = [line for line in output.splitlines() if line.strip()]
    if lines and lines[0].split(",")[0].strip() == "index":
        lines = lines[1:]
    if not lines:
        raise InventoryUnreadable("nvidia-smi listed no GPU")
    gpus = []
    for row in csv.reader(io.StringIO("\n".join(lines)), skipinitialspace=True):
        if len(row) != len(GPU_FIELDS) or not row[0].strip().isdigit():
            raise InventoryUnreadable(f"not a --query-gpu row: {','.join(row)[:200]!r}")
        index, name, uuid, serial, bus, driver, vbios, memory = (c.strip() for c in row)
        gpus.append(Gpu(int(index), name, uuid, serial, bus, driver, vbios, _memory(memory)))
    return tuple(gpus)


def parse_smi_header(output: str) -> tuple[str, str]:
    """(driver, CUDA version) from the banner of plain `nvidia-smi`."""
    cuda, driver = CUDA.search(output), DRIVER.search(output)
    if cuda is None or driver is None:
        raise InventoryUnreadable("no 'Driver Version:'/'CUDA Version:' in the nvidia-smi banner")
    return driver.group(1), cuda.group(1)


def parse_ibstat(output: str) -> tuple[IbPort, ...]:
    """Every port of every CA (`CA 'mlx5_0'` … `Port 1:` … `State:`/`Rate:`/`Link layer:`)."""
    ports: list[IbPort] = []
    ca: str | None = None
    port: int | None = None
    keys: dict[str, str] = {}

    def flush() -> None:
        if ca is not None and port is not None:
            if "State" not in keys:
                raise InventoryUnreadable(f"ibstat: {ca} port {port} has no State")
            rate = keys.get("Rate", "")
            ports.append(
                IbPort(
                    ca,
                    port,
                    keys["State"],
                    int(float(rate)) if re.fullmatch(r"[0-9.]+", rate) else None,
                    keys.get("Link layer", ""),
                )
            )

    for line in output.splitlines():
        if match := CA.match(line):
            flush()
            ca, port, keys = match.group(1), None, {}
        elif match := PORT.match(line):
            flush()
            port, keys = int(match.group(1)), {}
        elif port is not None and (match := KEY.match(line)):
            keys[match.group(1).strip()] = match.group(2).strip()
    flush()
    if not ports:
        raise InventoryUnreadable("ibstat listed no CA port")
    return tuple(ports)


@dataclass(frozen=True)
class Baseline:
    """What a node of the pool should show (`values`, enforced); `source` says where it came
    from. What the pool's in-service nodes show but does not bind: `unenforced` (key → the value
    and the nodes showing it) when a single machine would set it or no majority exists
    (`disagreeing` names those keys), and `off_baseline` (node → its values that differ from an
    enforced one), reported on the timeline, never failing the node under test."""

    values: Mapping[str, Any]
    source: str
    nodes: int = 0
    disagreeing: tuple[str, ...] = field(default_factory=tuple)
    unenforced: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    off_baseline: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


BASELINE_KEYS = ("gpu_count", "gpu_model", "driver", "cuda", "vbios", "ib_active", "ib_rate")

"""A node's kernel log as `/dev/kmsg` would print it, appended to a file one record a line.

The NVRM lines are the driver's own formats (see docs/agent.md): `NVRM: Xid (PCI:%04x:%02x:%02x):
%d, pid=%s, name=%s, %s`, the fallen-off-the-bus line without the word Xid, and the
`NVRM: GPU at PCI:…: GPU-<uuid>` line the driver prints when it attaches a GPU.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

KERN_INFO, KERN_WARNING, KERN_ERR = 6, 4, 3
# The process an XID names: the job's for application-visible faults, none for bus faults.
NO_PROCESS = "pid='<unknown>', name=<unknown>"


def nvrm_pci(pci_bus_id: str) -> str:
    """DCGM's `00000000:18:00.0` → the driver's `0000:18:00`."""
    domain, bus, rest = pci_bus_id.lower().split(":")
    return f"{domain[-4:]}:{bus}:{rest.split('.')[0]}"


def xid_line(pci_bus_id: str, code: int, text: str, pid: int | None, process: str) -> str:
    who = NO_PROCESS if pid is None else f"pid={pid}, name={process}"
    return f"NVRM: Xid (PCI:{nvrm_pci(pci_bus_id)}): {code}, {who}, {text}"


def fallen_off_line(pci_bus_id: str) -> str:
    return f"NVRM: GPU {pci_bus_id.lower()[-12:]}: GPU has fallen off the bus."


def attach_line(pci_bus_id: str, uuid: str) -> str:
    return f"NVRM: GPU at PCI:{nvrm_pci(pci_bus_id)}: {uuid}"


class KernelLog:
    """Append-only; one write() per record, so a reader sees a record whole or not yet.

    Timestamps are this host's monotonic clock, as the kernel's are: the simulated node booted
    with the machine, so an agent here turns them into wall time the way it does on a node."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seq = self._last_seq()

    def _last_seq(self) -> int:
        if not self.path.exists():
            return -1
        lines = self.path.read_bytes().splitlines()
        for line in reversed(lines):
            head = line.split(b";", 1)[0].split(b",")
            if len(head) >= 2 and head[1].isdigit():
                return int(head[1])
        return -1

    def write(self, message: str, priority: int = KERN_WARNING) -> int:
        with self._lock:
            self._seq += 1
            usec = int(time.monotonic() * 1_000_000)
            # PRIORITY,SEQUENCE,TIMESTAMP_USEC,FLAGS;MESSAGE — as /dev/kmsg hands records out.
            record = f"{priority},{self._seq},{usec},-;{message}\n"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write(record)
            return self._seq

    def write_raw(self, line: str) -> None:
        """A line as given (garbage, a truncated record), for the agent's tests."""
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")

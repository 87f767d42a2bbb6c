"""The `/dev/kmsg` record format, pure.

One record: `PRIORITY,SEQUENCE,TIMESTAMP_USEC,FLAGS[,…];MESSAGE`, optionally followed by
continuation lines that start with a space (` SUBSYSTEM=pci`, ` DEVICE=+pci:…`); non-printable
bytes in MESSAGE are escaped as `\\xNN` by the kernel. The sequence number grows by one per
record within a boot, which is what the agent's resume position is made of.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KmsgRecord:
    seq: int
    timestamp_usec: int
    facility: int
    level: int
    message: str


def parse_record(raw: str) -> KmsgRecord | None:
    """One record (continuation lines allowed); None when it is garbage or truncated."""
    first, _, _ = raw.partition("\n")
    prefix, sep, message = first.partition(";")
    if not sep:
        return None
    fields = prefix.split(",")
    if len(fields) < 4:
        return None
    priority, seq, stamp = fields[0], fields[1], fields[2]
    if not (priority.isdigit() and seq.isdigit() and stamp.isdigit()):
        return None
    value = int(priority)
    return KmsgRecord(
        seq=int(seq),
        timestamp_usec=int(stamp),
        facility=value >> 3,
        level=value & 7,
        message=message,
    )


def format_record(seq: int, timestamp_usec: int, message: str, priority: int = 4) -> str:
    """The record as the kernel prints it (without the trailing newline); priority 4 is
    KERN_WARNING, the level NVRM logs XIDs at."""
    return f"{priority},{seq},{timestamp_usec},-;{message}"

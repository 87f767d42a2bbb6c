"""The agent's pure parts: kmsg records, the driver's information files, presence, the JSON it
sends (checked against the controller's own Signal model), and its retry arithmetic."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from remediator.agent.follow import Entry, Journal, KmsgDevice, KmsgFile
from remediator.agent.gpus import GpuInfo, missing_gpus, parse_information, pci_key, scan_driver
from remediator.agent.http import Response
from remediator.agent.kmsg import parse_record
from remediator.agent.push import Backoff, refused_indices, retry_after
from remediator.agent.report import missing_signal, xid_signal
from remediator.agent.runner import logged_at
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sxid import parse_sxid_line
from remediator.signals.xid import parse_kernel_line
from remediator.sim.node import driver
from remediator.sim.node.kernel_log import KernelLog, fallen_off_line, xid_line
from remediator.sim.telemetry.exporters import gpu_uuid, pci_bus_id

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_kmsg_records_and_garbage() -> None:
    record = parse_record("4,1207,98765432,-;NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, y")
    assert record is not None
    assert (record.seq, record.timestamp_usec, record.level) == (1207, 98765432, 4)
    assert record.message.startswith("NVRM: Xid")
    with_continuation = parse_record("6,5,10,c;pci 0000:18:00.0: reset\n SUBSYSTEM=pci")
    assert with_continuation is not None and with_continuation.message == "pci 0000:18:00.0: reset"
    for garbage in ("", "hello world", "4,12,345", "4,x,1,-;msg", "4,1;msg", "\x00\x01;"):
        assert parse_record(garbage) is None, garbage


def test_pci_addresses_agree_between_dcgm_kernel_and_driver() -> None:
    dcgm = pci_bus_id(1)  # 00000000:2A:00.0
    assert pci_key(dcgm) == pci_key("0000:2a:00.0") == pci_key("0000:2a:00") == "0000:2a:00"
    xid = parse_kernel_line(xid_line(dcgm, 79, "GPU has fallen off the bus", None, "python"))
    assert xid is not None and xid.pci == pci_key(dcgm) and xid.code == 79 and xid.pid is None
    fallen = parse_kernel_line(fallen_off_line(dcgm))
    assert fallen is not None and fallen.pci == pci_key(dcgm) and fallen.code == 79


def test_driver_information_maps_pci_to_index_and_uuid(tmp_path: Path) -> None:
    for index in range(3):
        driver.attach(
            tmp_path, "NVIDIA H100 80GB HBM3", gpu_uuid("n1", index), pci_bus_id(index), index
        )
    found = scan_driver(tmp_path / driver.GPUS_DIR)
    assert found[pci_key(pci_bus_id(2))] == GpuInfo(
        "0000:3a:00", 2, gpu_uuid("n1", 2), "NVIDIA H100 80GB HBM3"
    )
    assert scan_driver(tmp_path / "nowhere") == {}
    info = parse_information("Model: X\nGPU UUID: N/A\n", "0000:18:00.0")
    assert info == GpuInfo("0000:18:00", None, None, "X")


def test_missing_gpus() -> None:
    present = {f"p{i}": GpuInfo(f"p{i}", i, None) for i in (0, 1, 3)}
    assert missing_gpus(4, present, None) == [2]
    assert missing_gpus(3, present, None) == [2]  # index 3 present, 2 absent
    assert missing_gpus(2, present, None) == []
    assert missing_gpus(4, present, on_bus=2) == [2, None]  # the bus lost one more
    anonymous = {f"p{i}": GpuInfo(f"p{i}", None, None) for i in range(3)}
    assert missing_gpus(4, anonymous, None) == [None]
    assert missing_gpus(3, anonymous, None) == []


def test_reports_are_signals_the_controller_accepts() -> None:
    line = "NVRM: Xid (PCI:0000:18:00 GPU-I:01 GPU-CI:02): 94, pid=4242, name=python, Contained"
    xid = parse_kernel_line(line)
    assert xid is not None
    body = xid_signal("node-a", xid, GpuInfo("0000:18:00", 0, "GPU-1234"), None, NOW)
    signal = Signal.model_validate(body)
    assert (signal.kind, signal.code, signal.gpu, signal.gpu_uuid) == (
        SignalKind.XID,
        94,
        0,
        "GPU-1234",
    )
    assert signal.labels == {
        "pci": "0000:18:00",
        "message": "Contained",
        "pid": "4242",
        "process": "python",
        "gpu_instance": "1",
        "compute_instance": "2",
        "line": line,
    }
    unmapped = Signal.model_validate(xid_signal("node-a", xid, None, "GPU-from-log", NOW))
    assert unmapped.gpu is None and unmapped.gpu_uuid == "GPU-from-log"
    missing = Signal.model_validate(missing_signal("node-a", 3, 8, 7, NOW))
    assert (missing.kind, missing.gpu, missing.value) == (SignalKind.GPU_MISSING, 3, 1.0)
    assert Signal.model_validate(missing_signal("node-a", None, 8, 8, NOW)).gpu is None


def test_backoff_and_server_answers() -> None:
    backoff = Backoff(base=0.1, cap=5.0)
    assert 0.05 <= backoff.delay(0) <= 0.1
    assert 2.5 <= backoff.delay(10) <= 5.0
    assert 30 <= backoff.delay(3, retry_after=30) <= 36  # obeyed whole, beyond the cap
    assert 1 <= backoff.delay(3, retry_after=1) <= 1.2
    assert 300 <= backoff.delay(3, retry_after=86_400) <= 360
    assert retry_after(Response(503, {"retry-after": "5"}, b"")) == 5.0
    assert retry_after(Response(503, {}, b"")) is None
    assert refused_indices({"detail": [{"index": 2}, {"index": None}, "x"]}) == {2}
    assert refused_indices(None) == set()


def test_kmsg_file_waits_for_a_partial_line_and_resumes_after_its_position(
    tmp_path: Path,
) -> None:
    path = tmp_path / "kmsg"
    log = KernelLog(path)
    log.write("first")
    with path.open("a") as out:
        out.write("4,1,5,-;sec")  # the writer is mid-record
    follower = KmsgFile(path, None, poll_interval=0.01)
    first = follower.read(0.05)
    assert [e.message for e in first] == ["first"]
    with path.open("a") as out:
        out.write("ond\n")
    second = follower.read(0.05)
    assert [e.message for e in second] == ["second"]
    follower.close()
    log = KernelLog(path)
    log.write("third")
    resumed = KmsgFile(path, second[-1].position, poll_interval=0.01)
    assert [e.message for e in resumed.read(0.05)] == ["third"]
    # Only the sequence number known (an offset past the end): the file is read again from
    # the top, and records up to that number are skipped.
    assert [e.message for e in KmsgFile(path, "1:999999").read(0.05)] == ["third"]
    resumed.close()


def test_records_carry_the_time_the_kernel_logged_them(tmp_path: Path) -> None:
    log = KernelLog(tmp_path / "kmsg")
    log.write("NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, gone")
    (entry,) = KmsgFile(tmp_path / "kmsg", None).read(0.05)
    assert entry.logged_at is not None
    assert time.time() - 5 < entry.logged_at <= time.time() + 0.01
    now = datetime.now(UTC)
    assert logged_at(entry, now) <= now
    earlier = Entry("1", "x", logged_at=now.timestamp() - 600)
    assert logged_at(earlier, now) == now - timedelta(seconds=600)
    assert logged_at(Entry("1", "x"), now) == now


JOURNAL_LINES = [
    {
        "MESSAGE": "Linux version 6.8.0",
        "__CURSOR": "s=1;i=1",
        "__REALTIME_TIMESTAMP": "1700000000000000",
    },
    "not json",
    {
        # journald sends a message that is not valid UTF-8 as a list of bytes
        "MESSAGE": list(b"NVRM: Xid (PCI:0000:18:00): 48, pid=7, name=py, DBE \xff"),
        "__CURSOR": "s=1;i=2",
        "__REALTIME_TIMESTAMP": "1700000001000000",
    },
]


def test_journal_entries_resume_by_cursor(tmp_path: Path) -> None:
    """`journalctl -k -f -o json`'s fields, from a stand-in process (no journald runs here)."""
    script = tmp_path / "journalctl.py"
    lines = [json.dumps(x) if isinstance(x, dict) else str(x) for x in JOURNAL_LINES]
    script.write_text(
        "import sys, time\n"
        "print(' '.join(sys.argv[1:]), file=open(sys.argv[0] + '.args', 'w'))\n"
        f"print({chr(10).join(lines)!r}, flush=True)\n"
        "time.sleep(30)\n"
    )
    journal = Journal([sys.executable, str(script)], "s=1;i=0")
    entries: list[Entry] = []
    deadline = time.monotonic() + 10
    while len(entries) < 3 and time.monotonic() < deadline:
        entries += journal.read(0.2)
    journal.close()
    assert (tmp_path / "journalctl.py.args").read_text().strip() == "--after-cursor s=1;i=0"
    assert [e.position for e in entries] == ["s=1;i=1", "s=1;i=1", "s=1;i=2"]
    assert entries[1].message is None
    assert entries[0].logged_at == 1_700_000_000.0
    xid = parse_kernel_line(entries[2].message or "")
    assert xid is not None and xid.code == 48


@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg is not readable here")
def seq_of(position: str) -> int:
    return int(position.partition(":")[0])


def test_the_real_kmsg_device_reads_records_and_resumes_after_a_position() -> None:
    """Read only: this machine's kernel log is not ours to write to."""
    device = KmsgDevice(Path("/dev/kmsg"), None)
    entries = device.read(0.2)
    device.close()
    assert len(entries) >= 2
    seqs = [seq_of(e.position) for e in entries if e.message is not None]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert all(e.logged_at is not None and e.logged_at <= time.time() for e in entries)
    middle = entries[len(entries) // 2].position
    resumed = KmsgDevice(Path("/dev/kmsg"), middle)
    again = resumed.read(0.2)
    resumed.close()
    assert again and seq_of(again[0].position) == seq_of(middle) + 1
    assert resumed.restarts == 0  # the same boot: its records sit where the position says


def test_nvswitch_sxid_lines_are_recognised_and_are_no_xid() -> None:
    """The switch driver's format (Fabric Manager User Guide): no NVRM prefix, a switch's
    bus:device.function, the SXid code, then the severity."""
    lines = [
        "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up",
        "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 12033, Severity 1 Engine instance 00",
        "nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 11004, Non-fatal, Link 36 ingress (First)",
    ]
    for line in lines:
        assert parse_sxid_line(line) is not None and parse_kernel_line(line) is None
    xid = "NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, x"
    assert parse_sxid_line(xid) is None
    cut = parse_sxid_line("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): ")  # cut short: kept raw
    assert cut is not None and cut.raw is not None
    assert parse_sxid_line("nvidia-nvswitch1: probe done") is None

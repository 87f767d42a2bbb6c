"""The agent's loop: read the kernel log, turn XID records into signals, commit them with the
log position, wake the pusher; every so often check GPU presence; a thread sends heartbeats.

The position is committed in the same transaction as the signals of the records up to it, so a
restart resumes exactly after the last record whose signals are safe on disk. Records without
signals move the position too, at most once a second (replaying those yields nothing).
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from remediator import __version__
from remediator.agent import report
from remediator.agent.expected import ExpectedUnknown, KubeAccess, fetch_expected
from remediator.agent.fabric import (
    FABRIC_MANAGER_UNIT,
    FabricManagerState,
    GpuFabric,
    parse_fabric,
    parse_fabric_manager_line,
    parse_is_active,
)
from remediator.agent.follow import Entry, Follower, Journal, KmsgDevice, KmsgFile
from remediator.agent.gpus import GpuInfo, count_pci_gpus, missing_gpus, scan_driver
from remediator.agent.heartbeat import Beat, HeartbeatLoop, Pacing, whole_due
from remediator.agent.http import HttpClient
from remediator.agent.identity import (
    DMI_SERIAL_FILE,
    SMI_COMMAND,
    HostIdentity,
    host_hardware,
    read_identity,
)
from remediator.agent.push import Backoff, Pusher
from remediator.agent.queue import DurableQueue
from remediator.agent.stats import Stats
from remediator.signals.sxid import parse_sxid_line
from remediator.signals.xid import parse_kernel_line, parse_pci_uuid_line

log = logging.getLogger(__name__)

POSITION, BOOT, MISSING = "position", "boot_id", "missing"
FLUSH_SECONDS = 1.0
SXID_LOG_SECONDS = 60.0
EXPECTED_REFRESH_SECONDS = 300.0
JOURNAL_COMMAND = ("journalctl", "-k", "-f", "-o", "json", "--boot", "--no-tail")


@dataclass(frozen=True)
class AgentConfig:
    node: str
    controller_url: str
    state_dir: Path
    token: str | None = None
    source: Literal["kmsg", "file", "journal"] = "kmsg"
    kmsg_path: Path = Path("/dev/kmsg")
    journal_command: Sequence[str] = JOURNAL_COMMAND
    driver_dir: Path = Path("/proc/driver/nvidia/gpus")
    dmi_serial_file: Path = DMI_SERIAL_FILE
    smi_command: Sequence[str] | None = SMI_COMMAND
    pci_dir: Path | None = None
    boot_id_file: Path = Path("/proc/sys/kernel/random/boot_id")
    expected_gpus: int | None = None
    kube: KubeAccess | None = None
    agent_name: str = field(default_factory=socket.gethostname)
    heartbeat_seconds: float = 10.0
    heartbeat_backoff_cap_seconds: float = 30.0
    presence_seconds: float = 10.0
    queue_capacity: int = 10_000
    poll_seconds: float = 0.05
    timeout_seconds: float = 5.0
    backoff: Backoff = field(default_factory=Backoff)
    # Rack-scale trays (NVL72): the GPUs' fabric section and Fabric Manager's state, read with
    # the presence check. None: not read (a machine without NVSwitches).
    fabric_smi_command: Sequence[str] | None = None
    fabric_manager_command: Sequence[str] | None = None
    fabric_manager_log: Path | None = None


def _now() -> datetime:
    return datetime.now(UTC)


def logged_at(entry: Entry, now: datetime) -> datetime:
    """When the kernel logged the record (a replay after downtime keeps its time), never later
    than now: the two clocks it is computed from may disagree by a little."""
    if entry.logged_at is None:
        return now
    return min(now, datetime.fromtimestamp(entry.logged_at, UTC))


def _run(command: Sequence[str]) -> tuple[int, str, str] | None:
    """(exit status, stdout, stderr); None when the program cannot be run at all."""
    try:
        done = subprocess.run(
            list(command), capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("%s could not be run: %s", command[0], exc)
        return None
    return done.returncode, done.stdout, done.stderr


def fabric_manager_command(unit: str = FABRIC_MANAGER_UNIT) -> tuple[str, ...]:
    return ("systemctl", "is-active", unit)


def read_boot_id(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.stats = Stats()
        self.started_at = _now()
        self.queue = DurableQueue(config.state_dir / "agent.db", config.queue_capacity)
        self.boot_id = read_boot_id(config.boot_id_file)
        if not self.boot_id:
            log.warning(
                "boot_id unreadable (%s): a reboot is told by the kernel log itself",
                config.boot_id_file,
            )
        same_boot = self.queue.get(BOOT) == self.boot_id
        self.position = self.queue.get(POSITION) if same_boot else None
        self.reported_missing: set[str] = (
            set(json.loads(self.queue.get(MISSING) or "[]")) if same_boot else set()
        )
        self.gpus: dict[str, GpuInfo] = scan_driver(config.driver_dir)
        self.uuids: dict[str, str] = {}
        self.hardware: HostIdentity | None = None
        headers = {"Authorization": f"Bearer {config.token}"} if config.token else {}
        self.client = HttpClient(
            config.controller_url, headers=headers, timeout=config.timeout_seconds
        )
        self.pusher = Pusher(
            self.client, self.queue, self.stats, backoff=config.backoff, on_refused=self._refused
        )
        self._lock = threading.Lock()
        self._missing_refused: set[str] = set()
        self._hardware_lock = threading.Lock()
        self.whole_due = True  # the first heartbeat carries the host's identity whole
        self.heartbeats = HeartbeatLoop(
            self.client,
            self.heartbeat_body,
            self.stats,
            Pacing(period=config.heartbeat_seconds, cap=config.heartbeat_backoff_cap_seconds),
            on_beat=self._answered,
        )
        self._stop = threading.Event()
        self._heartbeats = threading.Thread(target=self._heartbeat_loop, name="heartbeat")
        self._heartbeats.daemon = True
        self._expected: int | None = config.expected_gpus
        self._expected_at = 0.0
        self._dirty_position: str | None = None
        self._sxid_logged_at = -SXID_LOG_SECONDS
        self._flushed_at = time.monotonic()
        self.fabric: dict[str, GpuFabric] = {}
        self.fabric_manager: FabricManagerState | None = None
        self._fm_offset: int | None = None

    def open_follower(self) -> Follower:
        config = self.config
        if config.source == "journal":
            return Journal(config.journal_command, self.position)
        if config.source == "file":
            return KmsgFile(config.kmsg_path, self.position, config.poll_seconds)
        return KmsgDevice(config.kmsg_path, self.position)

    # -- the kernel log -------------------------------------------------------------------

    def handle(self, entries: Sequence[Entry]) -> list[dict[str, Any]]:
        """Signals for `entries`; counts what was read and what was skipped."""
        signals: list[dict[str, Any]] = []
        now = _now()
        for entry in entries:
            message = entry.message
            if message is None:
                self.stats.add("records_skipped")
                continue
            self.stats.add("records_read")
            if "NVRM" not in message:
                if "SXid" in message:
                    signal = self._sxid(message, logged_at(entry, now))
                    if signal is not None:
                        signals.append(signal)
                continue
            mapping = parse_pci_uuid_line(message)
            if mapping is not None:
                self.uuids[mapping[0]] = mapping[1]
                continue
            xid = parse_kernel_line(message)
            if xid is None:
                if "NVRM: Xid" in message:
                    self.stats.add("xid_lines_unparsed")
                continue
            gpu = self._gpu(xid.pci)
            when = logged_at(entry, now)
            uuid = self.uuids.get(xid.pci)
            hardware = self._hardware().labels(xid.pci)
            signals.append(report.xid_signal(self.config.node, xid, gpu, uuid, when, hardware))
        return signals

    def _sxid(self, message: str, when: datetime) -> dict[str, Any] | None:
        """An NVSwitch error as a signal. Its detail lines (registers of the error just reported)
        are counted, not sent again; a line that cannot be read goes out raw."""
        sxid = parse_sxid_line(message)
        if sxid is None:
            return None
        if sxid.detail:
            self.stats.add("sxid_detail_lines")
            return None
        if sxid.raw is not None:
            self._unparsed_sxid(message)
        fabric = next((f for f in self.fabric.values() if f.cluster_uuid), None)
        return report.sxid_signal(self.config.node, sxid, fabric, when)

    def _unparsed_sxid(self, message: str) -> None:
        """Counted, and logged at most once a minute: a failing NVSwitch can log many a second."""
        self.stats.add("sxid_lines_unparsed")
        now = time.monotonic()
        if now - self._sxid_logged_at >= SXID_LOG_SECONDS:
            self._sxid_logged_at = now
            log.warning(
                "NVSwitch SXid lines this agent cannot read are sent raw (%d so far, counted in "
                "sxid_lines_unparsed); the latest: %s",
                self.stats.get("sxid_lines_unparsed"),
                message,
            )

    def _hardware(self) -> HostIdentity:
        """Read once, by the first heartbeat (on its own thread: nvidia-smi may take seconds)
        or the first XID, whichever comes first."""
        with self._hardware_lock:
            if self.hardware is None:
                self.hardware = read_identity(self.config.dmi_serial_file, self.config.smi_command)
            return self.hardware

    # -- the NVLink fabric ----------------------------------------------------------------

    def check_fabric(self) -> list[dict[str, Any]]:
        """Reads the GPUs' fabric section and Fabric Manager's state and log; queues a signal
        when Fabric Manager stops or starts being active, and one per error line in its log."""
        config = self.config
        if config.fabric_smi_command is not None:
            out = _run(config.fabric_smi_command)
            if out is not None and out[0] == 0:
                self.fabric = {f.pci: f for f in parse_fabric(out[1])}
        now = _now()
        new: list[dict[str, Any]] = []
        if config.fabric_manager_command is not None:
            out = _run(config.fabric_manager_command)
            if out is not None:
                state = parse_is_active(out[1], out[0], out[2])
                before = self.fabric_manager
                changed = before.healthy != state.healthy if before else not state.healthy
                if state.present and changed:
                    new.append(report.fabric_manager_signal(config.node, now, state=state))
                self.fabric_manager = state
        if config.fabric_manager_log is not None:
            for line in self._fabric_manager_lines():
                parsed = parse_fabric_manager_line(line)
                if parsed is not None:
                    new.append(report.fabric_manager_signal(config.node, now, line=parsed))
        if new:
            self.queue.commit(new, {BOOT: self.boot_id})
            self.stats.add("signals_queued", len(new))
            self.pusher.wake()
        return new

    def _fabric_manager_lines(self) -> list[str]:
        """Lines appended to Fabric Manager's log since the last read (from its end at start: its
        history was reported by the agent that read it then); a shorter file starts over."""
        path = self.config.fabric_manager_log
        assert path is not None
        try:
            size = path.stat().st_size
        except OSError:
            return []
        if self._fm_offset is None or size < self._fm_offset:
            self._fm_offset = size if self._fm_offset is None else 0
        if size == self._fm_offset:
            return []
        with path.open("rb") as f:
            f.seek(self._fm_offset)
            data = f.read(size - self._fm_offset)
        complete, newline, _ = data.rpartition(b"\n")
        if not newline:
            return []
        self._fm_offset += len(complete) + 1
        return complete.decode("utf-8", errors="replace").splitlines()

    def _gpu(self, pci: str) -> GpuInfo | None:
        if pci not in self.gpus:
            self.gpus.update(scan_driver(self.config.driver_dir))
        return self.gpus.get(pci)

    def consume(self, entries: Sequence[Entry]) -> None:
        if not entries:
            self._flush_position(force=False)
            return
        signals = self.handle(entries)
        position = entries[-1].position
        if signals:
            self.queue.commit(signals, {POSITION: position, BOOT: self.boot_id})
            self.stats.add("signals_queued", len(signals))
            self._dirty_position = None
            self._flushed_at = time.monotonic()
            self.pusher.wake()
        else:
            self._dirty_position = position
            self._flush_position(force=False)
        self.position = position

    def _flush_position(self, *, force: bool) -> None:
        due = time.monotonic() - self._flushed_at >= FLUSH_SECONDS
        if self._dirty_position is not None and (force or due):
            self.queue.commit([], {POSITION: self._dirty_position, BOOT: self.boot_id})
            self._dirty_position = None
            self._flushed_at = time.monotonic()

    # -- GPU presence ---------------------------------------------------------------------

    def expected(self) -> int | None:
        if self.config.expected_gpus is not None:
            return self.config.expected_gpus
        access = self.config.kube or KubeAccess.in_cluster()
        stale = time.monotonic() - self._expected_at > EXPECTED_REFRESH_SECONDS
        if access is not None and (self._expected is None or stale):
            try:
                self._expected = fetch_expected(access, self.config.node)
                self._expected_at = time.monotonic()
            except ExpectedUnknown as exc:
                log.warning("GPU presence not checked: %s", exc)
        return self._expected

    def _refused(self, signal: dict[str, Any]) -> None:
        """A refused `gpu_missing` (a reading that aged past the bound while the controller was
        down) is forgotten, so the next check reports the GPU again, fresh, if it is still gone.
        Called on the pusher's thread."""
        if signal.get("kind") == "gpu_missing":
            with self._lock:
                self._missing_refused.add(str(signal.get("gpu", "unknown")))

    def check_presence(self) -> list[dict[str, Any]]:
        """`gpu_missing` signals for GPUs newly gone; a GPU that came back may be reported
        again later. Committed with the reported set, so a restart does not repeat them."""
        with self._lock:
            forgotten, self._missing_refused = self._missing_refused, set()
        self.reported_missing -= forgotten
        expected = self.expected()
        if expected is None:
            self.stats.add("presence_unknown")
            return []
        present = scan_driver(self.config.driver_dir)
        self.gpus.update(present)
        on_bus = count_pci_gpus(self.config.pci_dir) if self.config.pci_dir else None
        missing = missing_gpus(expected, present, on_bus)
        keys = {str(i) if i is not None else "unknown" for i in missing}
        now = _now()
        new = [
            report.missing_signal(self.config.node, i, expected, len(present), now)
            for i in missing
            if (str(i) if i is not None else "unknown") not in self.reported_missing
        ]
        if keys != self.reported_missing:
            state = {MISSING: json.dumps(sorted(keys)), BOOT: self.boot_id}
            self.queue.commit(new, state)
            self.reported_missing = keys
            if new:
                self.stats.add("signals_queued", len(new))
                self.pusher.wake()
        return new

    # -- heartbeats -----------------------------------------------------------------------

    def heartbeat_body(self) -> dict[str, Any]:
        self.stats.set("queue_depth", len(self.queue))
        self.stats.set("signals_dropped", self.queue.dropped)
        return report.heartbeat(
            self.config.node,
            self.config.agent_name,
            __version__,
            self.started_at,
            self.stats.snapshot(),
            host_hardware(self._hardware(), dict(self.gpus)),
            whole=self.whole_due,
        )

    def _answered(self, beat: Beat) -> None:
        self.whole_due = whole_due(self.whole_due, beat)

    def heartbeat(self) -> bool:
        return self.heartbeats.send().ok

    def _heartbeat_loop(self) -> None:
        self.heartbeats.run(self._stop)

    # -- lifecycle ------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Until `stop` is set (SIGTERM); the position is flushed on the way out."""
        follower = self.open_follower()
        self.pusher.start()
        self._heartbeats.start()
        next_presence = 0.0
        try:
            while not stop.is_set():
                if time.monotonic() >= next_presence:
                    self.check_presence()
                    self.check_fabric()
                    next_presence = time.monotonic() + self.config.presence_seconds
                self.consume(follower.read(timeout=0.5))
                self.stats.set("records_lost", follower.lost)
                self.stats.set("log_restarts", follower.restarts)
        finally:
            self._flush_position(force=True)
            follower.close()
            self._stop.set()
            self.pusher.stop()
            self._heartbeats.join(timeout=self.config.timeout_seconds + 1)
            self.client.close()
            self.queue.close()

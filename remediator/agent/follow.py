"""Followers of the kernel log: `/dev/kmsg`, a file of kmsg records (the simulator's, or a
capture), or `journalctl -k -f -o json`. Each hands out entries with an opaque position to
resume *after*, so a restarted agent neither repeats nor skips a record.

A record that cannot be parsed (garbage, or truncated mid-record) comes out with no message:
the runner counts and skips it. A partial last line of a file is not truncated yet — the writer
may still be writing it — so it waits for its newline.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import select
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

from remediator.agent.kmsg import parse_record

READ_CHUNK = 65536
KMSG_RECORD_MAX = 8192
HEAD_BYTES = 64
# kmsg stamps records with the scheduler clock, which NTP does not slew as it does the monotonic
# clock the agent reads: over days the two part by a little, never by a reboot's worth.
CLOCK_SLACK_USEC = 60_000_000

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Entry:
    position: str
    message: str | None  # None: garbage or a truncated record, to be skipped and counted
    logged_at: float | None = None  # seconds since the epoch, when the kernel logged it


def boot_epoch() -> float:
    """Wall time of boot: kmsg timestamps count microseconds on the monotonic clock."""
    return time.time() - time.monotonic()


class Follower(Protocol):
    lost: int  # records the source dropped before we read them (a kmsg ring overrun)

    @property
    def restarts(self) -> int:
        """Times the log was seen to start again (a new boot), see Resume."""

    def read(self, timeout: float) -> list[Entry]: ...

    def close(self) -> None: ...


def _seq_of(position: str | None) -> int:
    if not position:
        return -1
    head = position.partition(":")[0]
    return int(head) if head.isdigit() else -1


def _field(position: str | None, index: int) -> int | None:
    parts = position.split(":") if position else []
    return int(parts[index]) if len(parts) > index and parts[index].isdigit() else None


def _ends_at(file: BinaryIO, offset: int, seq: int) -> bool:
    """Whether a saved offset still ends the record it was saved after: a log cleared in place
    while the agent was down, and written past the offset since, has other bytes there. The
    line before the offset is that record, or garbage the position does not name."""
    if offset == 0:
        return True
    start = max(0, offset - KMSG_RECORD_MAX)
    before = os.pread(file.fileno(), offset - start, start)
    if not before.endswith(b"\n"):
        return False
    record = parse_record(before[:-1].rpartition(b"\n")[2].decode("utf-8", errors="replace"))
    return record is None or record.seq == seq


def uptime_usec() -> int:
    """The kernel's clock now, the one kmsg timestamps count on."""
    return int(time.monotonic() * 1_000_000)


class Resume:
    """Which records a follower has passed, and whether the log has started again since.

    A boot_id tells a new boot when it can be read; without one ("" equals "") the saved
    position would outlive a reboot and the new boot's records below it would be skipped without
    a word. The log tells it too, since within one boot sequence numbers and timestamps only
    grow: the saved record is later than the kernel's clock now; a record behind the previous
    one in sequence; or, while records up to the saved one are being skipped, one that cannot
    sit where it does (behind it in sequence but later in time, or ahead but earlier). Then the
    follower reads the new boot from its start, logs it and counts it (`restarts`)."""

    def __init__(self, seq: int, usec: int | None) -> None:
        self.after, self.after_usec = seq, usec
        self.seq, self.usec = seq, usec  # the last record passed
        self.restarts = 0
        self._prev: int | None = None
        self.skipping = seq >= 0  # nothing passed yet since the stream (re)started
        now = uptime_usec()
        if usec is not None and usec > now + now // 100 + CLOCK_SLACK_USEC:
            self.restart("the saved position is later than the kernel's clock")

    def restart(self, why: str) -> None:
        self.restarts += 1
        log.warning("kernel log restarted (%s): reading the new boot from its start", why)
        self.after, self.after_usec, self.skipping = -1, None, False
        self._prev = None  # the caller may read its stream again from the start

    def new_stream(self) -> None:
        """The source was reopened: skip what was passed in the old one."""
        self.after, self.after_usec = self.seq, self.usec
        self._prev, self.skipping = None, self.after >= 0

    def out_of_place(self, seq: int, usec: int) -> bool:
        """While skipping: the record cannot belong to the log the saved position is in."""
        if not self.skipping or self.after_usec is None:
            return False
        return usec > self.after_usec if seq <= self.after else usec < self.after_usec

    def passes(self, seq: int, usec: int) -> bool:
        """Whether the record is new; a sequence going back starts a new boot here."""
        if self._prev is not None and seq <= self._prev:
            self.restart(f"sequence number {seq} after {self._prev}")
        self._prev = seq
        if seq <= self.after:
            return False
        self.seq, self.usec, self.skipping = seq, usec, False
        return True


class KmsgFile:
    """A regular file of kmsg records, one per line, appended to by a writer.

    Followed by name, like `tail -F`: once the open file is read to its end, a path that now
    names another file (rotated, or replaced whole) is reopened from its start, and a file
    truncated in place (copytruncate), told before each read by its first bytes, is read again
    from its start; records already passed are skipped by sequence number. A path that is gone
    keeps the old file open until a new one appears. The position carries the file's inode and
    names the record its offset ends, so a restarted agent can tell its offset belongs to
    another file, or to this one before it was cleared."""

    def __init__(self, path: Path, position: str | None, poll_interval: float = 0.05) -> None:
        self.path = path
        self.lost = 0
        self.reopened = 0
        seq = _seq_of(position)
        self.resume = Resume(seq, _field(position, 3))
        self._offset = _field(position, 1) or 0
        inode = _field(position, 2)
        self._poll = poll_interval
        self._boot = boot_epoch()
        self._buffer = b""
        self._file: BinaryIO | None = None
        self._inode = 0
        self._head = b""  # the file's first bytes as last seen, see _same_head
        if path.exists():
            self._file = path.open("rb")
            own = os.fstat(self._file.fileno())
            self._inode = own.st_ino
            if (
                inode not in (None, own.st_ino)
                or own.st_size < self._offset
                or not _ends_at(self._file, self._offset, seq)
            ):
                self._offset = 0  # another file: the position belongs to the old one
            self._file.seek(self._offset)
        self._start = self._offset  # where this stream began: a restart found while skipping
        # re-reads from here

    @property
    def restarts(self) -> int:
        return self.resume.restarts

    def _open(self) -> bool:
        if self._file is None and self.path.exists():
            self._file = self.path.open("rb")
            self._inode = os.fstat(self._file.fileno()).st_ino
            self._offset, self._buffer, self._head, self._start = 0, b"", b"", 0
            self.resume.new_stream()
        return self._file is not None

    def read(self, timeout: float) -> list[Entry]:
        deadline = time.monotonic() + timeout
        while True:
            entries = self._drain()
            if entries or time.monotonic() >= deadline:
                return entries
            time.sleep(min(self._poll, max(0.0, deadline - time.monotonic())))

    def _follow_name(self) -> None:
        """At the end of the open file: reopen when the name moved on to another file."""
        assert self._file is not None
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            return  # rotated away and not created again yet: the old file may still grow
        own = os.fstat(self._file.fileno())
        if (named.st_dev, named.st_ino) != (own.st_dev, own.st_ino):
            log.info("kernel log %s was replaced: reading the new file from its start", self.path)
            self._file.close()
            self._file = self.path.open("rb")
            self._inode = os.fstat(self._file.fileno()).st_ino
            self._restart_stream()

    def _rewind(self) -> None:
        assert self._file is not None
        log.info("kernel log %s was truncated: reading it again from its start", self.path)
        self._file.seek(0)
        self._restart_stream()

    def _restart_stream(self) -> None:
        self.reopened += 1
        self._offset, self._buffer, self._head, self._start = 0, b"", b"", 0
        self.resume.new_stream()  # what was passed in the old file is skipped in the new one

    def _cleared(self) -> bool:
        """Whether the file was truncated in place since it was read, asked before reading on.

        A writer that appended again at once may already be past the old length: read at the
        old offset, the new file's first record would come out cut (garbage, skipped). Its
        first bytes tell it: each record carries its own sequence number."""
        assert self._file is not None
        head = os.pread(self._file.fileno(), HEAD_BYTES, 0)
        if head[: len(self._head)] != self._head:
            return True
        self._head = head
        return False

    def _drain(self) -> list[Entry]:
        if not self._open():
            return []
        assert self._file is not None
        if self._cleared():
            self._rewind()
        chunk = self._file.read(READ_CHUNK)
        if not chunk:
            self._follow_name()
            return []
        data = self._buffer + chunk
        complete, newline, self._buffer = data.rpartition(b"\n")
        if not newline:
            return []
        entries: list[Entry] = []
        consumed = self._offset
        resume = self.resume
        for line in complete.split(b"\n"):
            consumed += len(line) + 1
            if line.startswith(b" "):
                continue  # a continuation line (KEY=value) of the record before it
            record = parse_record(line.decode("utf-8", errors="replace"))
            if record is None:
                entries.append(Entry(self._position(consumed), None))
                continue
            if resume.out_of_place(record.seq, record.timestamp_usec):
                resume.restart(f"record {record.seq} cannot follow the saved {resume.after}")
                self._file.seek(self._start)
                self._offset, self._buffer = self._start, b""
                return []  # skipping: nothing passed yet, everything is read again
            if not resume.passes(record.seq, record.timestamp_usec):
                continue
            logged = self._boot + record.timestamp_usec / 1e6
            entries.append(Entry(self._position(consumed), record.message, logged))
        self._offset = consumed
        return entries

    def _position(self, offset: int) -> str:
        usec = "" if self.resume.usec is None else str(self.resume.usec)
        return f"{self.resume.seq}:{offset}:{self._inode}:{usec}"

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class KmsgDevice:
    """`/dev/kmsg`: each read() returns one record; EPIPE says the ring overwrote some."""

    def __init__(self, path: Path, position: str | None) -> None:
        self.lost = 0
        self.resume = Resume(_seq_of(position), _field(position, 1))
        self._boot = boot_epoch()
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.lseek(self._fd, 0, os.SEEK_SET)  # the oldest record still in the ring

    @property
    def restarts(self) -> int:
        return self.resume.restarts

    def read(self, timeout: float) -> list[Entry]:
        entries: list[Entry] = []
        waited = False
        resume = self.resume
        while True:
            try:
                raw = os.read(self._fd, KMSG_RECORD_MAX)
            except BlockingIOError:
                if entries or waited:
                    return entries
                select.select([self._fd], [], [], timeout)
                waited = True
                continue
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.lost += 1
                    continue
                raise
            record = parse_record(raw.decode("utf-8", errors="replace"))
            if record is None:
                entries.append(Entry(self._position(), None))
                continue
            if resume.out_of_place(record.seq, record.timestamp_usec):
                resume.restart(f"record {record.seq} cannot follow the saved {resume.after}")
                os.lseek(self._fd, 0, os.SEEK_SET)
                continue
            if resume.passes(record.seq, record.timestamp_usec):
                logged = self._boot + record.timestamp_usec / 1e6
                entries.append(Entry(self._position(), record.message, logged))

    def _position(self) -> str:
        usec = "" if self.resume.usec is None else str(self.resume.usec)
        return f"{self.resume.seq}:{usec}"

    def close(self) -> None:
        os.close(self._fd)


class Journal:
    """`journalctl -k -f -o json`, resumed with `--after-cursor`."""

    def __init__(self, command: Sequence[str], position: str | None) -> None:
        self.lost = 0
        self.restarts = 0  # journald's cursors name their boot: it never resumes across one
        args = list(command)
        if position:
            args += ["--after-cursor", position]
        self._proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self._proc.stdout is not None
        self._out = self._proc.stdout
        os.set_blocking(self._out.fileno(), False)
        self._buffer = b""
        self._cursor = position or ""

    def read(self, timeout: float) -> list[Entry]:
        ready, _, _ = select.select([self._out], [], [], timeout)
        if not ready:
            return []
        chunk = self._out.read(READ_CHUNK) or b""
        if not chunk and self._proc.poll() is not None:
            raise RuntimeError(f"journalctl exited with {self._proc.returncode}")
        complete, newline, rest = (self._buffer + chunk).rpartition(b"\n")
        if not newline:
            self._buffer = rest
            return []
        self._buffer = rest
        return [self._entry(line) for line in complete.split(b"\n") if line.strip()]

    def _entry(self, line: bytes) -> Entry:
        try:
            record = json.loads(line)
            message = record["MESSAGE"]
            self._cursor = str(record["__CURSOR"])
            logged = int(record["__REALTIME_TIMESTAMP"]) / 1e6
        except (ValueError, KeyError, TypeError):
            return Entry(self._cursor, None)
        if isinstance(message, list):  # journald sends non-UTF-8 messages as byte arrays
            message = bytes(b & 0xFF for b in message if isinstance(b, int)).decode(
                "utf-8", errors="replace"
            )
        if not isinstance(message, str):
            return Entry(self._cursor, None)
        return Entry(self._cursor, message, logged)

    def close(self) -> None:
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()

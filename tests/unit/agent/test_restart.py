"""A restarted kernel log told by the log itself, for nodes whose boot_id cannot be read
(#22 item 7): the saved position must not outlive a reboot and hide the new boot's records."""

from __future__ import annotations

import os
from pathlib import Path

from remediator.agent.follow import KmsgFile, uptime_usec
from remediator.agent.kmsg import format_record

SECOND = 1_000_000


def write(path: Path, records: list[tuple[int, int, str]]) -> None:
    with path.open("a") as out:
        for seq, usec, message in records:
            out.write(format_record(seq, usec, message) + "\n")


def messages(follower: KmsgFile) -> list[str | None]:
    return [e.message for e in follower.read(0.05)]


def test_a_saved_position_later_than_the_kernel_clock_is_from_an_earlier_boot(
    tmp_path: Path,
) -> None:
    """A real reboot: the new boot's sequence and clock both start again from zero."""
    path = tmp_path / "kmsg"
    write(path, [(0, SECOND, "Linux version"), (1, 2 * SECOND, "NVRM: Xid ...: 79")])
    saved = uptime_usec() + 3600 * SECOND  # logged an hour of uptime beyond the clock now
    follower = KmsgFile(path, f"500:4096:{os.stat(path).st_ino}:{saved}")
    assert messages(follower) == ["Linux version", "NVRM: Xid ...: 79"]
    assert follower.restarts == 1
    follower.close()


def test_a_sequence_going_back_in_one_file_starts_a_new_boot(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    write(path, [(5, 5 * SECOND, "old five"), (6, 6 * SECOND, "old six")])
    write(path, [(0, SECOND, "new zero"), (1, 2 * SECOND, "new one")])
    follower = KmsgFile(path, None)
    assert messages(follower) == ["old five", "old six", "new zero", "new one"]
    assert follower.restarts == 1
    follower.close()


def test_a_record_that_cannot_sit_below_the_saved_one_restarts_the_reading(
    tmp_path: Path,
) -> None:
    """The simulator's reboot: a new file, its sequence from 0, its clock going on."""
    path = tmp_path / "kmsg"
    write(path, [(0, 900 * SECOND, "new zero"), (1, 901 * SECOND, "new one")])
    follower = KmsgFile(path, f"7:0:0:{100 * SECOND}")
    assert messages(follower) + messages(follower) == ["new zero", "new one"]
    assert follower.restarts == 1
    follower.close()


def test_the_same_boot_resumes_after_its_position_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    write(path, [(seq, seq * SECOND, f"r{seq}") for seq in range(4)])
    follower = KmsgFile(path, None)
    entries = follower.read(0.05)
    follower.close()
    resumed = KmsgFile(path, entries[1].position)  # after r1
    replay = KmsgFile(path, entries[1].position.split(":")[0] + ":0:0:" + str(SECOND))
    assert messages(resumed) == ["r2", "r3"] and messages(replay) == ["r2", "r3"]
    assert resumed.restarts == replay.restarts == 0
    resumed.close()
    replay.close()


def test_records_skipped_before_the_restart_showed_are_read_again(tmp_path: Path) -> None:
    """The new boot's first records can look like ones already passed (lower sequence, earlier
    time); the first that cannot sit there shows the restart, and the file is read again."""
    path = tmp_path / "kmsg"
    write(path, [(0, 50 * SECOND, "a"), (1, 60 * SECOND, "b"), (2, 150 * SECOND, "c")])
    follower = KmsgFile(path, f"7:0:0:{100 * SECOND}")
    assert messages(follower) + messages(follower) == ["a", "b", "c"]
    assert follower.restarts == 1
    follower.close()

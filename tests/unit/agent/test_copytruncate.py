"""A log cleared in place (copytruncate) while its writer is already past the old length
(#39 item 8): reading on at the old offset landed mid-record, so the first new record came out
as garbage and was skipped. The follower tells the truncation before it reads there."""

from __future__ import annotations

import os
from pathlib import Path

from remediator.agent.follow import KmsgFile
from remediator.agent.kmsg import format_record

SECOND = 1_000_000


def write(path: Path, seqs: range, mode: str = "a") -> None:
    with path.open(mode) as out:
        for seq in seqs:
            out.write(format_record(seq, seq * SECOND, f"record {seq} " + "x" * seq) + "\n")


def read(follower: KmsgFile) -> list[str | None]:
    return [e.message for e in follower.read(0.05)]


def test_a_running_follower_reads_the_first_record_after_a_copytruncate(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    write(path, range(3))
    follower = KmsgFile(path, None)
    assert read(follower) == [f"record {seq} " + "x" * seq for seq in range(3)]
    old_length = path.stat().st_size
    write(path, range(3, 8), mode="w")  # copied away, cleared, and written past the old end
    assert path.stat().st_size > old_length
    assert read(follower) == [f"record {seq} " + "x" * seq for seq in range(3, 8)]
    assert follower.reopened == 1
    follower.close()


def test_a_restarted_agent_reads_a_log_cleared_while_it_was_down(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    write(path, range(3))
    follower = KmsgFile(path, None)
    saved = follower.read(0.05)[-1].position
    follower.close()
    write(path, range(3, 8), mode="w")  # the same inode, longer than the saved offset
    assert int(saved.split(":")[2]) == os.stat(path).st_ino
    resumed = KmsgFile(path, saved)
    assert read(resumed) == [f"record {seq} " + "x" * seq for seq in range(3, 8)]
    resumed.close()

"""The node agent against a real push API: a restart (even SIGKILL) neither repeats nor loses a
kernel-log record, a controller outage loses nothing, garbage is skipped and counted, and a
vanished GPU is reported once."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remediator.signals.model import Signal
from remediator.sim.node import driver
from remediator.sim.node.hosts import BOOT_ID
from remediator.sim.node.kernel_log import KernelLog
from remediator.sim.telemetry.exporters import pci_bus_id
from tests.integration.agent_support import (
    AgentProcess,
    AgentThread,
    Host,
    PushServer,
    agent_config,
    wait_for,
)

pytestmark = pytest.mark.integration

# The outage the "controller down" test holds the push API off for. The issue asks for 60 s;
# the mechanism (transport errors, capped backoff, the on-disk queue) does not depend on the
# length, so the default keeps the suite fast: AGENT_OUTAGE_SECONDS=60 runs the full minute.
OUTAGE_SECONDS = float(os.environ.get("AGENT_OUTAGE_SECONDS", "3"))


@pytest.fixture
def server(sqlite_head_template: Path, tmp_path: Path) -> Iterator[PushServer]:
    # Real agents heartbeat in real time: their node's buckets refill in real time too. On the
    # test's frozen clock a node had three heartbeats for the whole test, so on a loaded machine
    # the first agent could spend them all and the second's (with its stats) were all refused.
    push = PushServer(
        tmp_path / "controller.db", sqlite_head_template, admission_clock=time.monotonic
    ).start()
    yield push
    push.stop()


def codes(server: PushServer) -> list[tuple[int | None, int | None]]:
    return [(s.gpu, s.code) for s in server.signals() if s.kind.value == "xid"]


def sxids(server: PushServer) -> list[Signal]:
    return [s for s in server.signals() if s.kind.value == "sxid"]


def queued(state: Path) -> int:
    with sqlite3.connect(state / "agent.db") as db:
        (count,) = db.execute("SELECT count(*) FROM queue").fetchone()
    return int(count)


def test_sigkill_restart_replays_nothing_and_loses_nothing(
    server: PushServer, tmp_path: Path
) -> None:
    host, state, log = Host(tmp_path / "host"), tmp_path / "state", tmp_path / "agent.log"
    first = [(0, 13), (1, 31), (2, 43)]
    for gpu, code in first:
        host.xid(gpu, code)
    agent = AgentProcess(host, state, server.url, log)
    wait_for("the first batch", lambda: len(codes(server)) == 3)

    server.stop()  # nothing can be delivered: the next batch is only queued when the kill lands
    second = [(3, 48), (4, 62)]
    for gpu, code in second:
        host.xid(gpu, code)
    wait_for("the second batch on disk", lambda: queued(state) == 2)
    agent.kill()

    third = [(5, 79), (6, 94)]
    for gpu, code in third:
        host.xid(gpu, code)
    server.start()
    agent = AgentProcess(host, state, server.url, log)
    try:
        wait_for("every batch", lambda: len(codes(server)) >= 7)
        wait_for("an idle queue", lambda: queued(state) == 0)
        # One more record after everything: once it arrives, nothing older is still coming.
        host.xid(7, 74)
        wait_for("the last record", lambda: (7, 74) in codes(server))
    finally:
        assert agent.stop() == 0
    assert codes(server) == [*first, *second, *third, (7, 74)]
    uuids = {s.gpu: s.gpu_uuid for s in server.signals()}
    assert uuids[5] is not None and uuids[5].startswith("GPU-")
    assert {s.labels["pci"] for s in server.signals() if s.gpu == 5} == {"0000:ab:00"}


def test_controller_outage_loses_nothing(server: PushServer, tmp_path: Path) -> None:
    host = Host(tmp_path / "host")
    running = AgentThread(agent_config(host, tmp_path / "state", server.url))
    try:
        host.xid(0, 79)
        wait_for("the first XID", lambda: len(codes(server)) == 1)
        server.stop()
        during = [(gpu, 48) for gpu in range(1, 8)]
        for gpu, code in during:
            host.xid(gpu, code)
        stats = running.agent.stats
        wait_for("failed pushes", lambda: stats.get("push_errors") >= 2)
        wait_for("all queued", lambda: len(running.agent.queue) == len(during))
        time.sleep(OUTAGE_SECONDS)  # the outage itself: the controller stays down this long
        assert len(codes(server)) == 1
        server.start()
        wait_for("delivery after the outage", lambda: len(codes(server)) == 8)
    finally:
        running.stop()
    assert codes(server) == [(0, 79), *during]
    assert running.agent.stats.get("signals_sent") == 8


def test_garbage_and_truncated_lines_are_skipped_and_counted(
    server: PushServer, tmp_path: Path
) -> None:
    host = Host(tmp_path / "host")
    host.xid(0, 79)
    host.log.write_raw("this is not a kmsg record")
    host.log.write_raw("4,9999,123")  # cut off before the message
    host.log.write_raw("\x00\x01\x02;")
    host.log.write("NVRM: Xid (PCI:0000:18:00): 7")  # a record whose NVRM line was cut short
    # NVSwitch errors (SXids): each a signal; a detail line is counted; one cut short goes raw.
    host.log.write(
        "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up"
    )
    host.log.write("nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Data {0x10000000}")
    host.log.write("nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 11004, Non-fatal, Link 36 ingress")
    host.log.write("nvidia-nvswitch2: SXid (PCI:0000:07:0")
    host.xid(1, 48)
    running = AgentThread(agent_config(host, tmp_path / "state", server.url))
    try:
        wait_for("both XIDs", lambda: len(codes(server)) == 2)
        wait_for("the SXids", lambda: len(sxids(server)) == 3)
        stats = running.agent.stats
        wait_for("the counters", lambda: stats.get("records_skipped") == 3)
        assert stats.get("xid_lines_unparsed") == 1
        assert stats.get("sxid_lines_unparsed") == 1
        assert stats.get("sxid_detail_lines") == 1
        wait_for(
            "the heartbeat to carry them",
            lambda: (
                (status := server.agent_status(host.node)) is not None
                and status.stats.get("records_skipped") == 3
                and status.stats.get("sxid_lines_unparsed") == 1
            ),
        )
    finally:
        running.stop()
    assert codes(server) == [(0, 79), (1, 48)]
    fatal, non_fatal, raw = sxids(server)
    assert (fatal.code, fatal.labels["fatal"], fatal.labels["link"]) == (20034, "true", "48")
    assert (fatal.labels["switch"], fatal.labels["pci"]) == ("1", "0000:06:00.0")
    assert (non_fatal.code, non_fatal.labels["fatal"]) == (11004, "false")
    assert raw.code is None and raw.labels["raw"] == "nvidia-nvswitch2: SXid (PCI:0000:07:0"


def test_a_vanished_gpu_is_reported_once_across_restarts(
    server: PushServer, tmp_path: Path
) -> None:
    host, state = Host(tmp_path / "host"), tmp_path / "state"
    missing = lambda: [s for s in server.signals() if s.kind.value == "gpu_missing"]  # noqa: E731
    running = AgentThread(agent_config(host, state, server.url))
    try:
        wait_for("a heartbeat", lambda: server.agent_status(host.node) is not None)
        assert missing() == []
        driver.detach(host.root, pci_bus_id(5))
        wait_for("gpu_missing", lambda: len(missing()) == 1)
    finally:
        running.stop()
    signal = missing()[0]
    assert (signal.gpu, signal.value, signal.source) == (5, 1.0, "agent")
    running = AgentThread(agent_config(host, state, server.url))
    try:
        # A marker: the agent checks presence before it reads the log, so once the marker
        # arrives the restarted agent has seen the missing GPU again.
        host.xid(0, 13)
        wait_for("the marker", lambda: len(codes(server)) == 1)
    finally:
        running.stop()
    assert len(missing()) == 1


def test_file_mode_follows_the_log_by_name_through_rotation_and_truncation(
    server: PushServer, tmp_path: Path
) -> None:
    """#22 item 8: a replaced log file was not reopened (the agent kept reading the handle of
    the old one); the line arrived only after an agent restart. Follow by name, like tail -F."""
    host, state, log = Host(tmp_path / "host"), tmp_path / "state", tmp_path / "agent.log"
    host.xid(0, 13)
    agent = AgentProcess(host, state, server.url, log)
    try:
        wait_for("the first record", lambda: codes(server) == [(0, 13)])
        host.kmsg.rename(host.kmsg.with_name("kmsg.1"))  # rotated: the writer starts a new file
        host.xid(1, 48)
        wait_for("the record in the new file", lambda: (1, 48) in codes(server))
        os.truncate(host.kmsg, 0)  # truncated in place (copytruncate)
        host.xid(2, 31)
        wait_for("the record after the truncation", lambda: (2, 31) in codes(server))
        replacement = host.kmsg.with_name("kmsg.new")
        replacement.write_bytes(host.kmsg.read_bytes())
        replacement.replace(host.kmsg)  # replaced whole by another file of the same content
        host.xid(3, 94)
        wait_for("the record in the replacement", lambda: (3, 94) in codes(server))
    finally:
        assert agent.stop() == 0
    assert codes(server) == [(0, 13), (1, 48), (2, 31), (3, 94)]


def test_without_a_boot_id_a_restarted_log_is_read_from_its_start(
    server: PushServer, tmp_path: Path
) -> None:
    """#22 item 7: with boot_id unreadable, "" equalled "", so the position of the old boot was
    kept and the new boot's records below it were dropped without a word. The log itself tells a
    restart: its sequence numbers go back while its clock goes on."""
    host, state, log = Host(tmp_path / "host"), tmp_path / "state", tmp_path / "agent.log"
    (host.root / BOOT_ID).unlink()
    for gpu in range(6):
        host.log.write(f"filler {gpu}")
    host.xid(0, 13)
    agent = AgentProcess(host, state, server.url, log)
    try:
        wait_for("the old boot's record", lambda: codes(server) == [(0, 13)])
    finally:
        assert agent.stop() == 0
    host.kmsg.unlink()  # the node rebooted: a new log, its sequence from 0 again
    host.log = KernelLog(host.kmsg)
    host.xid(1, 79)
    agent = AgentProcess(host, state, server.url, log)
    try:
        wait_for("the new boot's record", lambda: (1, 79) in codes(server))
        # While running, too: the log restarts under the agent.
        host.kmsg.unlink()
        host.log = KernelLog(host.kmsg)
        host.xid(2, 48)
        wait_for("the next boot's record", lambda: (2, 48) in codes(server))
        wait_for(
            "the heartbeat to say so",
            lambda: (
                (status := server.agent_status(host.node)) is not None
                and status.stats.get("log_restarts", 0) >= 1
            ),
        )
    finally:
        assert agent.stop() == 0
    assert codes(server) == [(0, 13), (1, 79), (2, 48)]
    assert "kernel log restarted" in log.read_text()


def test_a_refused_vanished_gpu_is_reported_again_while_it_stays_gone(
    server: PushServer, tmp_path: Path
) -> None:
    """A `gpu_missing` is a reading: one that aged past the bound while the controller was down
    is refused. The agent forgets having reported it, so the GPU, still gone, is reported again
    fresh instead of never (the reported set outlives restarts)."""
    host = Host(tmp_path / "host")
    missing = lambda: [s for s in server.signals() if s.kind.value == "gpu_missing"]  # noqa: E731
    skew = 600.0
    server.console.clock.advance(skew)  # the controller's clock ahead: the report arrives too old
    running = AgentThread(agent_config(host, tmp_path / "state", server.url))
    try:
        driver.detach(host.root, pci_bus_id(5))
        stats = running.agent.stats
        wait_for("the report refused", lambda: stats.get("signals_refused") >= 1)
        assert missing() == []
        server.console.clock.advance(-skew)
        wait_for("the GPU reported again", lambda: len(missing()) == 1)
    finally:
        running.stop()
    assert missing()[0].gpu == 5

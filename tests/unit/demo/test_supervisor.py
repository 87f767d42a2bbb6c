"""The supervisor's process handling with real child processes: Ctrl-C forwarded to the whole
group, a stubborn child killed, start-up failures named with the child's log."""

from __future__ import annotations

import os
import socket
import stat
import sys
import threading
import time
from pathlib import Path

import pytest

from remediator.demo import supervisor
from remediator.demo.supervisor import (
    Child,
    DemoError,
    choose_signals,
    console_port,
    port_free,
    wait_for_json,
    write_private,
)

# Exits 0 on SIGINT after saying so; leaves a grandchild in its process group.
POLITE = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("grandchild", child.pid, flush=True)
def bye(*_):
    print("got SIGINT", flush=True)
    sys.exit(0)
signal.signal(signal.SIGINT, bye)
time.sleep(60)
"""
STUBBORN = """
import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
print("ignoring", flush=True)
time.sleep(60)
"""


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as stat_file:  # a zombie awaiting its reaper is gone too
        return stat_file.read().rsplit(")", 1)[1].split()[0] == "Z"


def wait_output(child: Child, text: str) -> str:
    deadline = time.monotonic() + 20
    while text not in child.log_path.read_text():
        assert time.monotonic() < deadline, child.log_tail()
        time.sleep(0.05)
    return child.log_path.read_text()


def test_stop_forwards_sigint_and_clears_the_process_group(tmp_path: Path) -> None:
    child = Child("polite", [sys.executable, "-c", POLITE], tmp_path / "polite.log")
    child.start()
    assert child.pid is not None and os.getpgid(child.pid) == child.pid  # its own group
    line = wait_output(child, "grandchild").splitlines()[0]
    grandchild = int(line.split()[1])
    assert child.stop(timeout=20) == "exit 0"
    assert "got SIGINT" in child.log_path.read_text()
    deadline = time.monotonic() + 10
    while not gone(grandchild):
        assert time.monotonic() < deadline, "the grandchild outlived the stop"
        time.sleep(0.05)


def test_a_child_that_ignores_sigint_is_killed(tmp_path: Path) -> None:
    child = Child("stubborn", [sys.executable, "-c", STUBBORN], tmp_path / "stubborn.log")
    child.start()
    wait_output(child, "ignoring")
    assert child.stop(timeout=0.5) == "killed after 0.5s"
    assert not child.alive()


def test_wait_for_json_returns_the_ready_file(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    write = f"pathlib.Path({str(ready)!r}).write_text('{{\"a\": 1}}')"
    script = f"import pathlib, time; {write}; time.sleep(30)"
    child = Child("writer", [sys.executable, "-c", script], tmp_path / "writer.log")
    child.start()
    try:
        assert wait_for_json(ready, child, threading.Event(), timeout=20) == {"a": 1}
    finally:
        child.stop(timeout=5)


def test_wait_for_json_names_a_child_that_died_and_its_log(tmp_path: Path) -> None:
    script = "import sys; print('boom: bad flag'); sys.exit(3)"
    child = Child("crasher", [sys.executable, "-c", script], tmp_path / "crasher.log")
    child.start()
    with pytest.raises(DemoError, match="crasher exited during start-up") as caught:
        wait_for_json(tmp_path / "never.json", child, threading.Event(), timeout=20)
    assert "boom: bad flag" in str(caught.value)


def test_wait_for_json_gives_up_when_asked_to_stop(tmp_path: Path) -> None:
    child = Child("sleeper", [sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "s")
    child.start()
    stop = threading.Event()
    stop.set()
    try:
        assert wait_for_json(tmp_path / "never.json", child, stop) is None
    finally:
        child.stop(timeout=5)


def test_signal_mode_choice() -> None:
    assert choose_signals("auto", "/usr/bin/prometheus") == "prometheus"
    assert choose_signals("auto", None) == "push"
    assert choose_signals("push", "/usr/bin/prometheus") == "push"
    with pytest.raises(DemoError, match="no prometheus"):
        choose_signals("prometheus", None)


def test_port_free_sees_a_listening_socket() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        assert not port_free("127.0.0.1", sock.getsockname()[1])
    assert port_free("127.0.0.1", 0)


def test_a_busy_default_port_falls_back_but_an_asked_for_one_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as busy, socket.socket() as spare:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        spare.bind(("127.0.0.1", 0))
        taken, free = busy.getsockname()[1], spare.getsockname()[1]
        spare.close()
        monkeypatch.setattr(supervisor, "DEFAULT_PORT", taken)
        assert console_port("127.0.0.1", None) == 0
        with pytest.raises(DemoError, match=f"port {taken} on 127.0.0.1 is taken"):
            console_port("127.0.0.1", taken)
        assert console_port("127.0.0.1", free) == free
        monkeypatch.setattr(supervisor, "DEFAULT_PORT", free)
        assert console_port("127.0.0.1", None) == free


def test_token_files_are_private_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "operator-token"
    path.write_text("old")
    path.chmod(0o644)
    write_private(path, "secret\n")
    assert path.read_text() == "secret\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

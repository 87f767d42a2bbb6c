"""What the agent tests share: a simulated host (the simulator's own kernel-log writer and
driver files), a controller push API that can go down and come back on the same port, and the
agent run in a thread or as the real CLI."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import uvicorn

from remediator.agent.push import Backoff
from remediator.agent.runner import Agent, AgentConfig
from remediator.signals.model import Signal
from remediator.sim.node import driver
from remediator.sim.node.hosts import BOOT_ID, KMSG
from remediator.sim.node.kernel_log import KernelLog, xid_line
from remediator.sim.telemetry.exporters import gpu_uuid, pci_bus_id
from remediator.store.records import AgentStatus
from tests.fixtures.web import PUSH_TOKEN, Console, build_console, free_port

NODE = "gpu-node-01"
GPUS = 8


def wait_for(what: str, check: Callable[[], bool], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Host:
    """A node's host root as the agent sees it below --host-root."""

    def __init__(self, root: Path, node: str = NODE, gpus: int = GPUS) -> None:
        self.root = root
        self.node = node
        (root / BOOT_ID).parent.mkdir(parents=True, exist_ok=True)
        (root / BOOT_ID).write_text("4b1e1a52-0000-4000-8000-000000000001\n")
        for index in range(gpus):
            driver.attach(
                root, "NVIDIA H100 80GB HBM3", gpu_uuid(node, index), pci_bus_id(index), index
            )
        self.log = KernelLog(root / KMSG)

    @property
    def kmsg(self) -> Path:
        return self.root / KMSG

    def xid(self, gpu: int, code: int) -> None:
        self.log.write(xid_line(pci_bus_id(gpu), code, "injected by the test", 4242, "python"))


class PushServer:
    """The console app (push API included) under uvicorn on a fixed port, restartable."""

    def __init__(
        self, database: Path, template: Path, admission_clock: Callable[[], float] | None = None
    ) -> None:
        shutil.copyfile(template, database)
        self.console: Console = build_console(f"sqlite:///{database}", admission_clock)
        # The agent stamps signals with the wall clock; the push API refuses the future.
        clock = self.console.clock
        clock.advance((datetime.now(UTC) - clock.now()).total_seconds())
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.received: list[Signal] = []
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> PushServer:
        config = uvicorn.Config(
            self.console.app, host="127.0.0.1", port=self.port, log_level="warning"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        wait_for("the push API", lambda: server.started)
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = self._thread = None

    def agent_status(self, node: str) -> AgentStatus | None:
        """As the console and API read it: the heartbeat book, not the (coalesced) rows."""
        book = self.console.deps.heartbeats
        assert book is not None
        return book.status(node)

    def signals(self) -> list[Signal]:
        self.received.extend(self.console.deps.inbox.drain())
        return self.received


def agent_config(host: Host, state: Path, url: str, **extra: object) -> AgentConfig:
    return AgentConfig(
        node=host.node,
        controller_url=url,
        state_dir=state,
        token=PUSH_TOKEN,
        source="file",
        kmsg_path=host.kmsg,
        driver_dir=host.root / driver.GPUS_DIR,
        boot_id_file=host.root / BOOT_ID,
        expected_gpus=GPUS,
        heartbeat_seconds=0.5,
        presence_seconds=0.2,
        poll_seconds=0.01,
        backoff=Backoff(base=0.05, cap=0.5),
        **extra,  # type: ignore[arg-type]
    )


class AgentThread:
    def __init__(self, config: AgentConfig) -> None:
        self.agent = Agent(config)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.agent.run, args=(self._stop,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)
        assert not self._thread.is_alive()


class AgentProcess:
    """The real `remediator agent` command."""

    def __init__(self, host: Host, state: Path, url: str, log: Path) -> None:
        env = {**os.environ, "REMEDIATOR_AGENT_TOKEN": PUSH_TOKEN}
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "remediator",
                    "agent",
                    "--node",
                    host.node,
                    "--controller-url",
                    url,
                    "--state-dir",
                    str(state),
                    "--host-root",
                    str(host.root),
                    "--kmsg",
                    str(host.kmsg),
                    "--expected-gpus",
                    str(GPUS),
                    "--heartbeat-interval",
                    "0.5",
                    "--poll-interval",
                    "0.01",
                    "--backoff-cap",
                    "0.5",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=15)
        return self.proc.returncode

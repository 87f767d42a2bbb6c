"""The demo supervisor: start the simulated cluster, (Prometheus,) and the controller with its
console as child processes, print where to look, run the fault scenario, and on Ctrl-C stop
everything it started.

Each child runs in its own session, so a Ctrl-C at the terminal reaches only the supervisor,
which then forwards SIGINT to each child's process group in turn (controller first, so that it
stops acting before the cluster goes away) and kills what does not exit in time. On Linux the
children also get SIGTERM should the supervisor itself die. Every child writes to its own log
file in the data directory; the terminal shows only the story.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any, Literal, TextIO

import httpx
import yaml

from remediator.demo.cloud_banner import inject_lines
from remediator.demo.config import ControllerInputs, controller_settings, prometheus_config
from remediator.demo.policies import (
    DemoTimings,
    describe_budgets,
    find_policies_dir,
    startup_taint_of,
    write_demo_policies,
)
from remediator.demo.relay import Relay
from remediator.demo.scenario import FIRST_ROUND, GUARDED_NAMESPACE, ScenarioRunner
from remediator.demo.slurm_jobs import running_jobs, slurm_banner, submit_demo_jobs
from remediator.demo.status import StatusReporter
from remediator.errors import RemediatorError
from remediator.sim.launch import CONTROLLER_ACCOUNT, DEFAULT_RBAC
from remediator.store import db

log = logging.getLogger(__name__)

SignalMode = Literal["auto", "prometheus", "push"]
DEFAULT_PORT = 8080
START_TIMEOUT = 90.0
STOP_TIMEOUT = 20.0
SLURM_STOP_TIMEOUT = 50.0
PR_SET_PDEATHSIG = 1


class DemoError(RemediatorError):
    """The demo cannot start or a part of it died; the message says which and where to look."""


@dataclass(frozen=True)
class DemoOptions:
    nodes: int = 16
    port: int | None = None  # None: DEFAULT_PORT, or any free port when that one is taken
    host: str = "127.0.0.1"
    fault_interval: float = 10.0
    data_dir: Path | None = None
    seed: int | None = None
    faults: bool = True
    signals: SignalMode = "auto"
    provision_delay: float = 3.0
    policies: Path | None = None
    cloud: str = "http"
    slurm: bool = False  # a real Slurm beside the cluster, with checkpointing jobs on it
    doa_rate: float = 0.0  # the fraction of replacement nodes that arrive dead
    topology: str = "default"  # or "nvl72": `racks` GB200 NVL72 racks instead of `nodes`
    racks: int = 2


def _die_with_parent() -> None:
    """Runs in the child before exec: ask Linux for SIGTERM when the supervisor dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Child:
    """One child process in its own session and process group, logging to a file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log_file:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _signal_group(self, signum: signal.Signals) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signum)

    def stop(self, timeout: float = STOP_TIMEOUT) -> str:
        """SIGINT to the group, SIGKILL after `timeout`; says how it ended."""
        if self.proc is None:
            return "not started"
        if self.proc.poll() is None:
            self._signal_group(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self.proc.wait(timeout=10)
                return f"killed after {timeout:g}s"
        # The group may hold stragglers the leader left behind.
        self._signal_group(signal.SIGKILL)
        return f"exit {self.proc.returncode}"

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def wait_for_json(
    path: Path, child: Child, stop: threading.Event, timeout: float = START_TIMEOUT
) -> dict[str, Any] | None:
    """The JSON a child writes once it is ready; None when asked to stop meanwhile."""
    deadline = time.monotonic() + timeout
    while not stop.is_set():
        if path.exists():
            try:
                loaded: dict[str, Any] = json.loads(path.read_text())
                return loaded
            except ValueError:
                pass  # written as we read it; the next look sees it whole
        if not child.alive():
            raise DemoError(
                f"{child.name} exited during start-up; the end of {child.log_path}:\n"
                f"{child.log_tail()}"
            )
        if time.monotonic() > deadline:
            raise DemoError(f"{child.name} not ready after {timeout:g}s; see {child.log_path}")
        stop.wait(0.1)
    return None


def write_private(path: Path, text: str) -> None:
    """Owner-only from the first byte: the file holds the operator token."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def port_free(host: str, port: int) -> bool:
    if port == 0:
        return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def console_port(host: str, wanted: int | None) -> int:
    """The port to give the console: the one asked for (which must be free), else the default
    when it is free, else 0 (any): a first run must not fail over a busy 8080."""
    if wanted is None:
        return DEFAULT_PORT if port_free(host, DEFAULT_PORT) else 0
    if not port_free(host, wanted):
        raise DemoError(f"port {wanted} on {host} is taken; --port 0 picks a free one")
    return wanted


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def find_prometheus() -> str | None:
    return shutil.which("prometheus") or (
        "/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None
    )


def choose_signals(mode: SignalMode, prometheus: str | None) -> Literal["prometheus", "push"]:
    if mode == "prometheus" and prometheus is None:
        raise DemoError("--signals prometheus: no prometheus binary on PATH")
    if mode == "auto":
        return "prometheus" if prometheus else "push"
    return mode


def remediator_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "remediator", *args]


class Demo:
    def __init__(self, options: DemoOptions, out: TextIO | None = None) -> None:
        self.options = options
        self.out = out or sys.stdout
        self.stop = threading.Event()
        self.children: list[Child] = []
        self.threads: list[threading.Thread] = []
        self._started = time.monotonic()
        self._print_lock = threading.Lock()
        self.data_dir = options.data_dir or Path(tempfile.mkdtemp(prefix="remediator-demo-"))
        self.logs = self.data_dir / "logs"

    # -- output ------------------------------------------------------------------------------

    def say(self, text: str) -> None:
        elapsed = int(time.monotonic() - self._started)
        with self._print_lock:
            print(f"[{elapsed // 60:02d}:{elapsed % 60:02d}] {text}", file=self.out, flush=True)

    def show(self, text: str) -> None:
        with self._print_lock:
            print(text, file=self.out, flush=True)

    # -- lifecycle ---------------------------------------------------------------------------

    def run(self) -> int:
        """Start everything, run until Ctrl-C (0) or until a part fails (1)."""
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.logs.mkdir(exist_ok=True)
            self._log_to_file()
            if not self.start():
                return 0
            return self.watch()
        except (RemediatorError, OSError) as exc:
            self.show(f"remediator demo: {exc}")
            return 1
        finally:
            self.shutdown()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if not self.stop.is_set():
            self.show(f"\n{signal.Signals(signum).name}: stopping…")
        self.stop.set()

    def _log_to_file(self) -> None:
        handler = logging.FileHandler(self.logs / "demo.log")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request drowns the rest

    def _child(self, name: str, argv: Sequence[str]) -> Child:
        child = Child(name, argv, self.logs / f"{name}.log")
        self.children.append(child)
        child.start()
        return child

    def start(self) -> bool:
        """Bring every part up in order; False when stopped half-way."""
        opts = self.options
        port = console_port(opts.host, opts.port)
        if opts.port is None and port != DEFAULT_PORT:
            self.say(f"port {DEFAULT_PORT} is taken: the console gets a free port instead")
        prometheus_bin = find_prometheus()
        mode = choose_signals(opts.signals, prometheus_bin)

        source = opts.policies or find_policies_dir()
        taint = startup_taint_of(source)
        nvl72 = opts.topology == "nvl72"
        fleet = (
            f"{opts.racks} GB200 NVL72 racks (18 four-GPU trays each)"
            if nvl72
            else f"{opts.nodes} nodes"
        )
        self.say(f"starting a simulated GPU cluster of {fleet}…")
        kubeconfig = self.data_dir / "kubeconfig"
        sim_ready = self.data_dir / "sim-ready.json"
        sim_ready.unlink(missing_ok=True)
        sim = self._child(
            "sim",
            remediator_argv(
                "sim", "serve",
                *(
                    ["--topology", "nvl72", "--racks", str(opts.racks)]
                    if nvl72
                    else ["--nodes", str(opts.nodes)]
                ),
                "--provision-delay", str(opts.provision_delay),
                "--kubeconfig", str(kubeconfig),
                "--ready-file", str(sim_ready),
                "--namespace", "remediator",
                "--namespace", GUARDED_NAMESPACE,
                "--cloud", opts.cloud,
                *(["--slurm"] if opts.slurm else []),
                *(["--doa-rate", str(opts.doa_rate)] if opts.doa_rate else []),
                *(["--startup-taint", taint] if taint else []),
                # The controller runs under the shipped RBAC, as in a cluster (from a checkout).
                *(["--rbac"] if DEFAULT_RBAC.is_dir() else []),
            ),
        )  # fmt: skip
        urls = wait_for_json(sim_ready, sim, self.stop)
        if urls is None:
            return False
        account = (urls.get("service_accounts") or {}).get(CONTROLLER_ACCOUNT)
        controller_kubeconfig = Path(account["kubeconfig"]) if account else kubeconfig

        policies_dir = self.data_dir / "policies"
        timings = DemoTimings()
        changes = write_demo_policies(source, policies_dir, timings)
        (self.data_dir / "policy-changes.txt").write_text("\n".join(changes) + "\n")

        prometheus_url: str | None = None
        if mode == "prometheus" and prometheus_bin is not None:
            prometheus_url = self._start_prometheus(prometheus_bin, urls["metrics_url"])
            if prometheus_url is None:
                return False

        token = secrets.token_urlsafe(24)
        token_file = self.data_dir / "operator-token"
        write_private(token_file, token + "\n")
        settings = controller_settings(
            ControllerInputs(
                kubeconfig=controller_kubeconfig,
                policies_dir=policies_dir,
                database_path=self.data_dir / "remediator.db",
                nodepool_url=urls["nodepool_url"],
                host=opts.host,
                port=port,
                operator_token=token,
                prometheus_url=prometheus_url,
                provider=urls.get("provider"),
                slurm=urls.get("slurm"),
            )
        )
        config = self.data_dir / "remediator.yaml"
        write_private(config, yaml.safe_dump(settings, sort_keys=False))
        db.upgrade(settings["database_url"])

        self.say("starting the controller and its console…")
        controller_ready = self.data_dir / "controller-ready.json"
        controller_ready.unlink(missing_ok=True)
        controller = self._child(
            "controller",
            remediator_argv("run", "--config", str(config), "--ready-file", str(controller_ready)),
        )
        ready = wait_for_json(controller_ready, controller, self.stop)
        if ready is None:
            return False
        console = str(ready["web_url"])

        submitted: list[int] = []
        if urls.get("slurm"):
            submitted = submit_demo_jobs(urls["slurm"], self.data_dir / "slurm-jobs", opts.nodes)
            self.say(f"submitted {len(submitted)} checkpointing Slurm jobs: {submitted}")
        self._banner(console, token, urls, prometheus_url, source, timings, config, submitted)
        if mode == "push":
            relay = Relay(urls["metrics_url"], console, token)
            self._thread("relay", relay.run)
        self._thread("status", StatusReporter(console, token, self.say).run)
        if opts.faults:
            scenario = ScenarioRunner(
                kubeconfig,
                urls["inject_url"],
                interval=opts.fault_interval,
                seed=opts.seed,
                say=self.say,
                slurm_jobs=partial(running_jobs, urls["slurm"]) if urls.get("slurm") else None,
            )
            self._thread("scenario", scenario.run)
        return True

    def _start_prometheus(self, binary: str, metrics_url: str) -> str | None:
        workdir = self.data_dir / "prometheus"
        workdir.mkdir(exist_ok=True)
        config = workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(prometheus_config(metrics_url), sort_keys=False))
        port = free_port(self.options.host)
        url = f"http://{self.options.host}:{port}"
        self.say(f"starting Prometheus on {url}…")
        child = self._child(
            "prometheus",
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address={self.options.host}:{port}",
                "--storage.tsdb.retention.time=1d",
                "--log.level=warn",
            ],
        )
        if not self._wait_http(f"{url}/-/ready", child):
            return None
        return url

    def _wait_http(self, url: str, child: Child) -> bool:
        deadline = time.monotonic() + START_TIMEOUT
        while not self.stop.is_set():
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return True
            except httpx.TransportError:
                pass
            if not child.alive():
                raise DemoError(f"{child.name} exited during start-up:\n{child.log_tail()}")
            if time.monotonic() > deadline:
                raise DemoError(f"{child.name} not ready after {START_TIMEOUT:g}s")
            self.stop.wait(0.2)
        return False

    def _thread(self, name: str, target: Callable[[threading.Event], None]) -> None:
        thread = threading.Thread(target=target, args=(self.stop,), name=name, daemon=True)
        thread.start()
        self.threads.append(thread)

    def watch(self) -> int:
        """Until Ctrl-C; a child that dies on its own ends the demo with its log's tail."""
        while not self.stop.wait(0.5):
            for child in self.children:
                if not child.alive():
                    raise DemoError(
                        f"{child.name} exited unexpectedly; the end of {child.log_path}:\n"
                        f"{child.log_tail()}"
                    )
        return 0

    def shutdown(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=15)
        for child in reversed(self.children):
            if child.proc is None:
                continue
            # A simulator with Slurm cancels the jobs and waits for their steps before it stops
            # the daemons: a SIGKILL then would leave slurmstepd and the jobs running.
            slow = child.name == "sim" and self.options.slurm
            how = child.stop(SLURM_STOP_TIMEOUT if slow else STOP_TIMEOUT)
            self.show(f"  {child.name} (pid {child.pid}) stopped: {how}")
        if self.children:
            self.show(f"stopped. Data and logs are kept in {self.data_dir}")

    def _banner(
        self,
        console: str,
        token: str,
        urls: dict[str, Any],
        prometheus_url: str | None,
        policies_source: Path,
        timings: DemoTimings,
        config: Path,
        slurm_jobs: list[int],
    ) -> None:
        logs = ", ".join(f"{c.name}.log" for c in self.children)
        if prometheus_url:
            signals = f"Prometheus at {prometheus_url} scrapes the simulated DCGM exporter"
        else:
            signals = (
                "no Prometheus installed: the demo relays the simulated DCGM exporter's "
                "readings to POST /api/v1/signals (the push API)"
            )
        if self.options.faults:
            faults = (
                f"one every {self.options.fault_interval:g}s: first "
                f"{', '.join(FIRST_ROUND)}, then random self-healing ones"
            )
        else:
            faults = "none (--no-faults); inject your own with the command above"
        lines = [
            "",
            "remediator demo is running",
            f"  console   {console}/",
            f"  token     {token}",
            "            (operator token: paste it on the login page; also in "
            f"{self.data_dir / 'operator-token'})",
            f'  API       curl -H "Authorization: Bearer $(cat {self.data_dir / "operator-token"})"'
            f" {console}/api/v1/remediations",
            f"  signals   {signals}",
            f"  policies  {self.data_dir / 'policies'}: a copy of {policies_source} with demo",
            f"            waits ({timings.describe()})",
            f"            and budgets ({describe_budgets()});",
            f"            every change: {self.data_dir / 'policy-changes.txt'}",
            f"  config    {config}",
            f"  database  {self.data_dir / 'remediator.db'} (SQLite)",
            f"  logs      {self.logs}/ ({logs}, demo.log)",
            f"  kubectl   kubectl --kubeconfig {self.data_dir / 'kubeconfig'} get nodes",
            *(
                [
                    f"  racks     {console}/racks: each rack an NVLink domain, a grid of its "
                    "18 trays,",
                    "            the gang jobs across them and the domain's open remediation",
                ]
                if self.options.topology == "nvl72"
                else []
            ),
            *inject_lines(
                str(Path(sys.executable).parent / "remediator"),
                urls["inject_url"],
                self.options.cloud,
            ),
            f"  faults    {faults}",
            *slurm_banner(urls.get("slurm"), self.data_dir / "slurm-jobs", slurm_jobs),
            "Press Ctrl-C to stop everything.",
            "",
        ]
        self.show("\n".join(lines))

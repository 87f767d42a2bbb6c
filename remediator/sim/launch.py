"""Start `remediator sim serve` as a child process and wait until it is ready.

Shared by the integration-test fixture, the benchmarks and the demo, so that each starts the
simulator exactly the way a user would: the real CLI, its ready file, its kubeconfig.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from remediator.sim.kube.access import kube_http


class KubectlError(RuntimeError):
    """Stock kubectl exited non-zero; the message carries its stderr."""


KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
READY_TIMEOUT = 240.0
CONTROLLER_ACCOUNT = "remediator/remediator"
AGENT_ACCOUNT = "remediator/remediator-agent"  # the node agent DaemonSet's
DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# The shipped RBAC (`sim serve --rbac` with no directory): present in a checkout.
DEFAULT_RBAC = DEPLOY / "base"


class SimHandle:
    def __init__(self, workdir: Path, proc: subprocess.Popen[bytes], ready: dict[str, Any]) -> None:
        self.workdir = workdir
        self.proc = proc
        self.kube_url = ready["kube_url"]
        self.nodepool_url = ready["nodepool_url"]
        self.metrics_url = ready["metrics_url"]
        self.inject_url = ready["inject_url"]
        root = ready.get("node_root")
        self.node_root = Path(root) if root else None
        self.cloud = str(ready.get("cloud", "http"))
        # The controller's `provider:` setting for this simulator's cloud, as it stands.
        self.provider: dict[str, Any] = dict(ready.get("provider") or {})
        self.aws_url = ready.get("aws_url")
        self.gce_url = ready.get("gce_url")
        # The `slurm` object of the ready file (with --slurm): the controller's `slurm:`.
        self.slurm: dict[str, Any] | None = ready.get("slurm")
        self.kubeconfig = workdir / "kubeconfig"
        # With RBAC the API server speaks TLS: the CA (PEM) its kubeconfigs carry, as a file.
        ca = ready.get("kube_ca")
        self.kube_ca = Path(ca) if ca else None
        self.log_path = workdir / "sim.log"
        # With RBAC: "namespace/name" of each bound ServiceAccount → {"token", "kubeconfig"}.
        self.service_accounts: dict[str, dict[str, str]] = dict(ready.get("service_accounts") or {})

    @property
    def controller_kubeconfig(self) -> Path:
        """The kubeconfig the controller runs with: its own ServiceAccount's token, held to the
        shipped RBAC, when the simulator enforces it; else the unrestricted admin's."""
        account = self.service_accounts.get(CONTROLLER_ACCOUNT)
        return Path(account["kubeconfig"]) if account else self.kubeconfig

    def kube_http(self, timeout: float | httpx.Timeout = 10.0) -> httpx.Client:
        """An httpx client for the API server as the admin kubeconfig has it (token, CA)."""
        return kube_http(self.kubeconfig, timeout)

    def kubectl(
        self,
        *args: str,
        timeout: float = 120.0,
        check: bool = True,
        kubeconfig: Path | None = None,
    ) -> str:
        """Run stock kubectl against this simulator (as the admin, or as `kubeconfig` says);
        stdout, or raise with stderr on failure."""
        done = subprocess.run(
            [
                KUBECTL,
                "--kubeconfig",
                str(kubeconfig or self.kubeconfig),
                "--cache-dir",
                str(self.workdir / "kubectl-cache"),
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise KubectlError(
                f"kubectl {' '.join(args)} failed ({done.returncode}):\n"
                f"{done.stderr}\n{done.stdout}"
            )
        return done.stdout if check else done.stdout + done.stderr

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                # A Slurm's jobs are cancelled and their steps awaited before its daemons stop.
                self.proc.wait(timeout=60 if self.slurm else 15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode


def start_sim(
    workdir: Path,
    nodes: int = 4,
    gpus_per_node: int = 8,
    provision_delay: float = 1.0,
    ready_timeout: float = READY_TIMEOUT,
    node_root: Path | None = None,
    cloud: str = "http",
    reboot_delay: float = 5.0,
    slurm: bool = False,
    rbac: Path | bool = True,
    doa_rate: float = 0.0,
    program_time_scale: float = 1.0,
    extra_args: tuple[str, ...] = (),
    startup_taint: str | None = None,
) -> SimHandle:
    """`rbac`: True enforces the shipped deploy/ RBAC for the ServiceAccounts' tokens (the
    controller's is `controller_kubeconfig`), a path other manifests, False none. `extra_args`
    go to `sim serve` as they are (`("--topology", "nvl72", "--racks", "2")`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready_file = workdir / "ready.json"
    log = (workdir / "sim.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "remediator",
            "sim",
            "serve",
            "--nodes",
            str(nodes),
            "--gpus-per-node",
            str(gpus_per_node),
            "--provision-delay",
            str(provision_delay),
            "--reboot-delay",
            str(reboot_delay),
            "--kubeconfig",
            str(workdir / "kubeconfig"),
            "--ready-file",
            str(ready_file),
            *(["--node-root", str(node_root)] if node_root is not None else []),
            "--cloud",
            cloud,
            *(["--slurm"] if slurm else []),
            *(["--rbac"] if rbac is True else ["--rbac", str(rbac)] if rbac else []),
            *(["--doa-rate", str(doa_rate)] if doa_rate else []),
            *(
                ["--program-time-scale", str(program_time_scale)]
                if program_time_scale != 1.0
                else []
            ),
            *extra_args,
            *(["--startup-taint", startup_taint] if startup_taint else []),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    deadline = time.monotonic() + ready_timeout
    while not ready_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
            raise RuntimeError(
                f"sim serve did not become ready:\n{(workdir / 'sim.log').read_text()[-4000:]}"
            )
        time.sleep(0.05)
    return SimHandle(workdir, proc, json.loads(ready_file.read_text()))

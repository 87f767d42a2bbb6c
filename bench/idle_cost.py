"""What the controller costs while nothing is wrong: the simulator at 250 and 2,000 nodes (8 GPUs
each), a real Prometheus scraping its DCGM / InfiniBand endpoint every 30 s (dcgm-exporter's
default), and `remediator run` at its defaults (15 s poll, leader election on, the shipped
policies; only the Prometheus poll's time bound is raised, see start_controller) over a healthy
fleet. The same Prometheus scrapes the controller's /metrics every 30 s, as the shipped
ServiceMonitor does: its gauges are read from the store at scrape time, so a bench without the
scrape would leave that cost out.

Method: every process is started the way a user starts it (sim serve, /usr/bin/prometheus, the
real CLI). After the controller has been ready for WARMUP seconds (first poll, node LIST, policy
load), its own CPU time (utime + stime from /proc/PID/stat: the controller process only, not the
simulator or Prometheus, and not wall time) is read at the start and end of a WINDOW-second
window; resident memory is VmRSS at the end and VmHWM (peak). Prometheus keeps only the metrics
the controller queries (metric_relabel_configs), which spares the shared machine a few hundred
thousand unread InfiniBand series and changes nothing the controller sees.

Usage: python -m bench idle_cost [--window SECONDS] [--sizes 250,2000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from remediator.sim.launch import SimHandle, start_sim
from remediator.store.db import upgrade

REPO = Path(__file__).resolve().parents[1]
POLICIES = REPO / "policies"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
GPUS = 8
WARMUP = 60.0
WINDOW = 240.0
SCRAPE = "30s"
CONTROLLER_TARGETS = "controller-targets.json"
PROMETHEUS_TIMEOUT = 30.0
QUERIED = (
    "DCGM_FI_DEV_(XID_ERRORS|GPU_TEMP|NVLINK_.*_ERROR_COUNT_TOTAL|ECC_DBE_.*_TOTAL"
    "|ROW_REMAP_FAILURE)"
    "|node_infiniband_(state_id|physical_state_id|link_downed_total|symbol_error_total)"
)
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Sample:
    nodes: int
    window: float
    cpu_seconds: float
    rss_mb: float
    peak_mb: float
    load: float

    @property
    def core_percent(self) -> float:
        return 100.0 * self.cpu_seconds / self.window


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def memory_mb(pid: int) -> tuple[float, float]:
    status = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_prometheus(workdir: Path, metrics_url: str) -> tuple[subprocess.Popen[bytes], str]:
    target = metrics_url.removeprefix("http://").rstrip("/")
    config = {
        "global": {"scrape_interval": SCRAPE, "scrape_timeout": "25s"},
        "scrape_configs": [
            {
                "job_name": "dcgm-exporter",
                "static_configs": [{"targets": [target]}],
                "metric_relabel_configs": [
                    {"source_labels": ["__name__"], "regex": QUERIED, "action": "keep"}
                ],
            },
            {
                # The controller's own /metrics, found once it listens (see scrape_controller).
                "job_name": "remediator",
                "file_sd_configs": [{"files": [str(workdir / CONTROLLER_TARGETS)]}],
            },
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (workdir / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={workdir / 'prometheus.yml'}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
    )
    return proc, f"http://127.0.0.1:{port}"


def wait_for_series(url: str, expected: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            answer = httpx.get(
                f"{url}/api/v1/query", params={"query": "count(DCGM_FI_DEV_GPU_TEMP)"}, timeout=10
            ).json()
            result = answer.get("data", {}).get("result", [])
            if result and int(float(result[0]["value"][1])) == expected:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(2.0)
    raise SystemExit(f"Prometheus did not see {expected} GPU series within {timeout:.0f}s")


def start_controller(workdir: Path, sim: SimHandle, prometheus_url: str) -> subprocess.Popen[bytes]:
    database = workdir / "remediator.db"
    upgrade(f"sqlite:///{database}")
    config = {
        "cluster_name": "idle-bench",
        "kubeconfig": str(sim.kubeconfig),
        "prometheus_url": prometheus_url,
        "policies_dir": str(POLICIES),
        "database_url": f"sqlite:///{database}",
        "provider": {"type": "http", "url": sim.nodepool_url},
        "web": {"listen": "127.0.0.1:0", "operator_tokens": ["idle-bench-token-0123456789"]},
        # The one change from the defaults: Prometheus on this shared, loaded machine takes
        # 0.2-1.5 s per query at 2,000 nodes, so the poll's 10 s bound would time it out and
        # measure a blind controller. The bound changes nothing of the controller's own work.
        "prometheus_timeout_seconds": PROMETHEUS_TIMEOUT,
    }
    (workdir / "controller.yaml").write_text(yaml.safe_dump(config))
    ready = workdir / "controller.ready"
    log = (workdir / "controller.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "remediator",
            "run",
            "--config",
            str(workdir / "controller.yaml"),
            "--ready-file",
            str(ready),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    deadline = time.monotonic() + 120
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise SystemExit(
                f"controller did not start:\n{(workdir / 'controller.log').read_text()[-3000:]}"
            )
        time.sleep(0.2)
    return proc


def scrape_controller(workdir: Path) -> None:
    """Point Prometheus at the controller's /metrics (file discovery picks the file up)."""
    ready = json.loads((workdir / "controller.ready").read_text())
    target = ready["web_url"].removeprefix("http://")
    temp = workdir / f"{CONTROLLER_TARGETS}.tmp"
    temp.write_text(json.dumps([{"targets": [target]}]))
    temp.replace(workdir / CONTROLLER_TARGETS)


def check_scraped(prometheus_url: str, nodes: int) -> None:
    """The window's cost includes the scrapes only if Prometheus did scrape the controller."""
    answer = httpx.get(
        f"{prometheus_url}/api/v1/query",
        params={"query": 'count_over_time(up{job="remediator"}[5m])'},
        timeout=10,
    ).json()
    result = answer.get("data", {}).get("result", [])
    if not result or float(result[0]["value"][1]) < 2:
        raise SystemExit(f"Prometheus did not scrape the controller at {nodes} nodes: {answer}")


def check_watching(workdir: Path, nodes: int) -> None:
    """An idle controller that is blind would be cheap too: every source must be up."""
    ready = json.loads((workdir / "controller.ready").read_text())
    metrics = httpx.get(f"{ready['web_url']}/metrics", timeout=10).text
    up = [line for line in metrics.splitlines() if line.startswith("remediator_source_up{")]
    if len(up) < 2 or not all(line.endswith(" 1.0") for line in up):
        raise SystemExit(f"a source is down at {nodes} nodes: {up}")
    if "source down" in (workdir / "controller.log").read_text():
        raise SystemExit(f"a source went down during the run at {nodes} nodes")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def measure(nodes: int, window: float, root: Path) -> Sample:
    workdir = root / f"n{nodes}"
    workdir.mkdir()
    sim = start_sim(workdir / "sim", nodes=nodes, gpus_per_node=GPUS, ready_timeout=300)
    prometheus: subprocess.Popen[bytes] | None = None
    controller: subprocess.Popen[bytes] | None = None
    try:
        prometheus, prometheus_url = start_prometheus(workdir, sim.metrics_url)
        wait_for_series(prometheus_url, nodes * GPUS)
        controller = start_controller(workdir, sim, prometheus_url)
        scrape_controller(workdir)
        time.sleep(WARMUP)
        before = cpu_seconds(controller.pid)
        started = time.monotonic()
        time.sleep(window)
        spent = cpu_seconds(controller.pid) - before
        elapsed = time.monotonic() - started
        rss, peak = memory_mb(controller.pid)
        check_watching(workdir, nodes)
        check_scraped(prometheus_url, nodes)
        return Sample(nodes, elapsed, spent, rss, peak, os.getloadavg()[0])
    finally:
        for proc in (controller, prometheus):
            if proc is not None:
                stop(proc)
        sim.stop()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench idle_cost")
    parser.add_argument("--window", type=float, default=WINDOW)
    parser.add_argument("--sizes", default="250,2000")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory(prefix="idle-cost-") as tmp:
        samples = [measure(n, args.window, Path(tmp)) for n in sizes]
    print(
        "| nodes | GPUs | window s | controller CPU s | % of a core | RSS MB | peak RSS MB | load |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for s in samples:
        print(
            f"| {s.nodes} | {s.nodes * GPUS} | {s.window:.0f} | {s.cpu_seconds:.2f} | "
            f"{s.core_percent:.2f} | {s.rss_mb:.0f} | {s.peak_mb:.0f} | {s.load:.1f} |"
        )
    if len(samples) >= 2 and samples[0].cpu_seconds > 0:
        print(
            f"CPU ratio {samples[-1].nodes}/{samples[0].nodes} nodes: "
            f"{samples[-1].cpu_seconds / samples[0].cpu_seconds:.2f}"
        )
    print(
        "idle cost: "
        + ", ".join(
            f"{s.nodes} nodes {s.core_percent:.2f}% core {s.rss_mb:.0f} MB" for s in samples
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

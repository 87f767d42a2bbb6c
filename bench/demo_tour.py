"""How long `remediator demo` takes to show its story: the real command (16 nodes, a fault every
10 s, the defaults a user gets), watched through the console's JSON API with the printed token.

Per signal mode (push relay; a real Prometheus when installed) and run: seconds from launch to
the printed console URL, then from there to the first remediation in each state the first round
is built to show, to all of them, and from Ctrl-C to exit. Medians over the runs, and Prometheus
as a ratio of push within the same invocation.

Usage: python -m bench.demo_tour [--runs N]
"""

from __future__ import annotations

import argparse
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from remediator.demo.supervisor import find_prometheus

LIMIT = 300.0
# The first round's promises: (label, state, text the hold reason must contain).
MILESTONES = (
    ("succeeded", "succeeded", ""),
    ("held_by_opt_out", "held_by_opt_out", ""),
    ("awaiting_approval", "awaiting_approval", ""),
    ("held by a PDB", "held", "disruption budget"),
    ("held on capacity", "held", "spare capacity"),
)


def reached(items: list[dict[str, Any]], state: str, reason: str) -> bool:
    return any(r["state"] == state and reason in (r.get("hold_reason") or "") for r in items)


def tour(signals: str) -> dict[str, float]:
    data_dir = Path(tempfile.mkdtemp(prefix="bench-demo-"))
    launched = time.monotonic()
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "remediator", "demo",
            "--port", "0", "--seed", "11", "--signals", signals, "--data-dir", str(data_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    times: dict[str, float] = {}
    try:
        console = token = None
        while console is None or token is None:
            text = "".join(lines)
            console_match = re.search(r"^  console\s+(\S+)$", text, re.M)
            token_match = re.search(r"^  token\s+(\S+)$", text, re.M)
            console = console_match.group(1) if console_match else None
            token = token_match.group(1) if token_match else None
            if proc.poll() is not None or time.monotonic() - launched > LIMIT:
                raise RuntimeError(f"demo did not start:\n{text}")
            time.sleep(0.05)
        ready = time.monotonic()
        times["launch → console"] = ready - launched
        with httpx.Client(timeout=10.0, headers={"Authorization": f"Bearer {token}"}) as client:
            while len(times) < len(MILESTONES) + 1:
                if time.monotonic() - ready > LIMIT:
                    raise RuntimeError(f"not every state within {LIMIT:g}s: {sorted(times)}")
                items = client.get(f"{console}api/v1/remediations?limit=500").json()["items"]
                now = time.monotonic() - ready
                for label, state, reason in MILESTONES:
                    if label not in times and reached(items, state, reason):
                        times[label] = now
                time.sleep(0.25)
        times["all of them"] = max(times[label] for label, _, _ in MILESTONES)
        asked = time.monotonic()
        proc.send_signal(signal.SIGINT)
        if proc.wait(timeout=60) != 0:
            raise RuntimeError("demo did not exit 0 on SIGINT")
        times["Ctrl-C → exit"] = time.monotonic() - asked
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="runs per signal mode (default 1)")
    args = parser.parse_args()
    modes = ["push"] + (["prometheus"] if find_prometheus() else [])
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
    for _ in range(args.runs):
        for mode in modes:
            results[mode].append(tour(mode))
    rows = ["launch → console", *(label for label, _, _ in MILESTONES), "all of them"]
    rows.append("Ctrl-C → exit")
    medians = {
        mode: {row: statistics.median(run[row] for run in runs) for row in rows}
        for mode, runs in results.items()
    }
    header = "| seconds (median of {}) | {} |{}".format(
        args.runs,
        " | ".join(modes),
        " prometheus ÷ push |" if len(modes) == 2 else "",
    )
    print(header)
    print("| --- |" + " ---: |" * (len(modes) + (len(modes) == 2)))
    for row in rows:
        cells = " | ".join(f"{medians[mode][row]:.1f}" for mode in modes)
        ratio = ""
        if len(modes) == 2:
            ratio = f" {medians['prometheus'][row] / max(medians['push'][row], 1e-9):.2f} |"
        print(f"| {row} | {cells} |{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`remediator agent`: the node agent's command line. Imports only what the agent needs, so a
DaemonSet pod starts small (see remediator/cli.py's light path)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import stat
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from remediator.agent.push import Backoff


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "agent", help="the node agent: kernel-log XIDs and GPU presence, pushed to the controller"
    )
    env = os.environ.get
    parser.add_argument("--node", default=env("NODE_NAME"), help="this node's name ($NODE_NAME)")
    parser.add_argument(
        "--controller-url",
        default=env("REMEDIATOR_CONTROLLER_URL"),
        help="the controller's console/API base URL ($REMEDIATOR_CONTROLLER_URL)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=env("REMEDIATOR_AGENT_TOKEN_FILE"),
        help="file holding a push-only token (or $REMEDIATOR_AGENT_TOKEN)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path(env("REMEDIATOR_AGENT_STATE_DIR", "/var/lib/remediator-agent")),
        help="where the queue and the log position live (a hostPath survives pod restarts)",
    )
    parser.add_argument(
        "--host-root",
        type=Path,
        default=Path("/"),
        help="the host's / as mounted in the pod: proc/driver/nvidia/gpus, proc/sys/kernel/"
        "random/boot_id and sys/bus/pci/devices are read below it",
    )
    parser.add_argument(
        "--kmsg",
        type=Path,
        default=Path("/dev/kmsg"),
        help="the kernel log: /dev/kmsg, or a file of kmsg records (the simulator's)",
    )
    parser.add_argument(
        "--source",
        choices=("auto", "kmsg", "file", "journal"),
        default="auto",
        help="auto: /dev/kmsg when --kmsg is a character device, else a file; "
        "journal: `journalctl -k -f -o json`",
    )
    parser.add_argument(
        "--expected-gpus",
        type=int,
        help="GPUs this node must have (default: from its Node: the nvidia.com/gpu.count label "
        "or nvidia.com/gpu capacity)",
    )
    parser.add_argument("--kube-url", help="Kubernetes API (default: in-cluster)")
    parser.add_argument("--kube-token-file", type=Path, help="token for --kube-url")
    parser.add_argument(
        "--kube-ca-file", type=Path, help="CA bundle to verify an https --kube-url by"
    )
    parser.add_argument("--heartbeat-interval", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument("--presence-interval", type=float, default=10.0, metavar="SECONDS")
    parser.add_argument("--queue-capacity", type=int, default=10_000, metavar="SIGNALS")
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=0.05,
        metavar="SECONDS",
        help="how often a kernel-log file is checked for new lines (not used for /dev/kmsg)",
    )
    parser.add_argument(
        "--backoff-cap",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="the longest wait between delivery attempts",
    )
    parser.add_argument(
        "--fabric",
        action="store_true",
        help="a rack-scale tray (NVL72): read the GPUs' fabric section (nvidia-smi -q), Fabric "
        "Manager's state (systemctl is-active nvidia-fabricmanager) and its log",
    )
    parser.add_argument(
        "--fabric-manager-log",
        type=Path,
        default=Path("/var/log/fabricmanager.log"),
        help="Fabric Manager's log, under --host-root (with --fabric)",
    )
    parser.set_defaults(func=run)


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file is not None:
        return Path(args.token_file).read_text().strip() or None
    return os.environ.get("REMEDIATOR_AGENT_TOKEN") or None


def _source(args: argparse.Namespace) -> Literal["kmsg", "file", "journal"]:
    if args.source == "journal":
        return "journal"
    if args.source in ("kmsg", "file"):
        return "kmsg" if args.source == "kmsg" else "file"
    try:
        is_device = stat.S_ISCHR(args.kmsg.stat().st_mode)
    except OSError:
        is_device = False
    return "kmsg" if is_device else "file"


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not args.node or not args.controller_url:
        print("error: --node and --controller-url are required", file=sys.stderr)
        return 2
    from remediator.agent.expected import KubeAccess
    from remediator.agent.runner import Agent, AgentConfig, fabric_manager_command

    kube = None
    if args.kube_url:
        token = args.kube_token_file.read_text().strip() if args.kube_token_file else None
        ca_file = str(args.kube_ca_file) if args.kube_ca_file else None
        kube = KubeAccess(args.kube_url, token, ca_file)
    pci_dir = args.host_root / "sys/bus/pci/devices"
    try:
        config = AgentConfig(
            node=args.node,
            controller_url=args.controller_url,
            state_dir=args.state_dir,
            token=_token(args),
            source=_source(args),
            kmsg_path=args.kmsg,
            driver_dir=args.host_root / "proc/driver/nvidia/gpus",
            pci_dir=pci_dir if pci_dir.is_dir() else None,
            boot_id_file=args.host_root / "proc/sys/kernel/random/boot_id",
            dmi_serial_file=args.host_root / "sys/class/dmi/id/product_serial",
            expected_gpus=args.expected_gpus,
            kube=kube,
            heartbeat_seconds=args.heartbeat_interval,
            presence_seconds=args.presence_interval,
            queue_capacity=args.queue_capacity,
            poll_seconds=args.poll_interval,
            backoff=Backoff(cap=args.backoff_cap),
            fabric_smi_command=("nvidia-smi", "-q") if args.fabric else None,
            fabric_manager_command=fabric_manager_command() if args.fabric else None,
            fabric_manager_log=(
                args.host_root / args.fabric_manager_log.relative_to("/")
                if args.fabric and args.fabric_manager_log.is_absolute()
                else args.fabric_manager_log
                if args.fabric
                else None
            ),
        )
        agent = Agent(config)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        agent.run(stop)
    except OSError as exc:  # the kernel log cannot be opened or read: say so and exit
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0

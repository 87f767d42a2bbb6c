"""`remediator demo`: everything on one machine, for a first look (what `make demo` runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from remediator.demo.supervisor import Demo, DemoError, DemoOptions
from remediator.sim.cli import CLOUDS, doa_rate


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {text}")
    return value


def _nodes(text: str) -> int:
    value = int(text)
    if not 2 <= value <= 2000:
        raise argparse.ArgumentTypeError(f"between 2 and 2000 nodes, got {text}")
    return value


def _racks(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 20:
        raise argparse.ArgumentTypeError(f"between 1 and 20 racks, got {text}")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="a simulated GPU cluster, the controller, its console and injected faults",
        description=(
            "Start a simulated GPU cluster, the controller with the default policies (shorter "
            "waits) on SQLite, and the console; print the console URL and an operator token; "
            "inject a fault every few seconds. Ctrl-C stops everything."
        ),
    )
    parser.add_argument("--nodes", type=_nodes, default=16, help="GPU nodes (default 16)")
    parser.add_argument(
        "--port",
        type=_port,
        help="console port (default 8080, or any free port when 8080 is taken; 0: any free port)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="console address (default 127.0.0.1)")
    parser.add_argument(
        "--fault-interval",
        type=_positive,
        default=10.0,
        metavar="SECONDS",
        help="seconds between injected faults (default 10)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        help="database, config, policies and logs (default: a new temporary directory). "
        "Reusing one keeps its database: remediations left open resume against the new "
        "simulated cluster, whose nodes have the same names",
    )
    parser.add_argument("--seed", type=int, help="random seed: the same faults on the same nodes")
    parser.add_argument(
        "--no-faults",
        dest="faults",
        action="store_false",
        help="inject nothing; use `remediator sim inject` yourself",
    )
    parser.add_argument(
        "--signals",
        choices=("auto", "prometheus", "push"),
        default="auto",
        help="prometheus: a real Prometheus scrapes the simulated exporters; push: the demo "
        "relays their readings to the push API; auto (default): prometheus when installed",
    )
    parser.add_argument(
        "--provision-delay",
        type=_positive,
        default=3.0,
        metavar="SECONDS",
        help="seconds the simulated cloud takes to provision a replacement (default 3)",
    )
    parser.add_argument(
        "--policies",
        type=Path,
        help="policy directory to start from (default: the shipped policies/)",
    )
    parser.add_argument(
        "--cloud",
        choices=CLOUDS,
        default="http",
        help="whose API replaces nodes: the generic node-pool contract (default), AWS (moto), "
        "Cluster API or Compute Engine",
    )
    parser.add_argument(
        "--slurm",
        action="store_true",
        help="also run a real Slurm (Debian's slurmctld/slurmd/munge) named after the nodes, with "
        "checkpointing jobs that remediator drains, signals, requeues and resumes",
    )
    parser.add_argument(
        "--doa-rate",
        type=doa_rate,
        default=0.0,
        metavar="R",
        help="the fraction (0-1) of replacement nodes that arrive dead on arrival (default 0)",
    )
    parser.add_argument(
        "--topology",
        choices=("default", "nvl72"),
        default="default",
        help="nvl72: GB200 NVL72 racks (--racks) of 18 four-GPU trays, one NVLink domain each, "
        "with gang jobs across each rack; the console's rack view (/racks) shows them",
    )
    parser.add_argument(
        "--racks",
        type=_racks,
        default=2,
        help="NVL72 racks with --topology nvl72 (default 2)",
    )
    parser.add_argument(
        "--clusters",
        type=int,
        default=1,
        help="simulated clusters, each with its own controller, and one fleet console on one "
        "database (PostgreSQL when installed, else SQLite in WAL mode); default 1",
    )
    parser.add_argument(
        "--database",
        choices=("auto", "postgresql", "sqlite"),
        default="auto",
        help="with --clusters: the shared database (auto: PostgreSQL when its server binaries "
        "are installed, else one SQLite file in WAL mode)",
    )
    parser.set_defaults(func=_demo)


def _demo(args: argparse.Namespace) -> int:
    options = DemoOptions(
        nodes=args.nodes,
        port=args.port,
        host=args.host,
        fault_interval=args.fault_interval,
        data_dir=args.data_dir,
        seed=args.seed,
        faults=args.faults,
        signals=args.signals,
        provision_delay=args.provision_delay,
        policies=args.policies,
        cloud=args.cloud,
        slurm=args.slurm,
        doa_rate=args.doa_rate,
        topology=args.topology,
        racks=args.racks,
    )
    if args.topology == "nvl72" and (args.slurm or args.cloud != "http" or args.clusters != 1):
        print(
            "remediator demo: --topology nvl72 runs one cluster on the node-pool contract; "
            "--slurm, --cloud and --clusters are for the default topology",
            file=sys.stderr,
        )
        return 2
    if args.clusters != 1:
        from remediator.demo.fleet import FleetDemo

        if args.slurm or args.cloud != "http" or args.signals == "prometheus":
            print(
                "remediator demo: --clusters runs the node-pool contract with relayed signals; "
                "--slurm, --cloud and --signals prometheus are for one cluster",
                file=sys.stderr,
            )
            return 2
        try:
            return FleetDemo(options, args.clusters, args.database).run()
        except DemoError as exc:
            print(f"remediator demo: {exc}", file=sys.stderr)
            return 2
    return Demo(options).run()

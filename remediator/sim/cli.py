"""`remediator sim serve` (the simulated cluster in one process) and `remediator sim inject`
(fault injection against a running one)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from remediator.sim import nvl72
from remediator.sim.faults import inject as inject_module
from remediator.sim.launch import DEFAULT_RBAC
from remediator.sim.nvl72 import TOPOLOGIES
from remediator.sim.serve import ServeOptions, serve

CLOUDS = ("http", "aws", "clusterapi", "gce")


def doa_rate(text: str) -> float:
    """A fraction of new nodes, 0 to 1."""
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"a fraction between 0 and 1, not {text!r}") from exc
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a fraction between 0 and 1, not {text}")
    return value


def time_scale(text: str) -> float:
    """A positive factor."""
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"a positive number, not {text!r}") from exc
    if not value > 0.0:
        raise argparse.ArgumentTypeError(f"a positive number, not {text}")
    return value


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"a positive integer, not {text!r}") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"a positive integer, not {text}")
    return value


def taint(text: str) -> dict[str, str]:
    """`key[=value]:effect`, the kubelet's --register-with-taints syntax."""
    head, _, effect = text.rpartition(":")
    key, _, value = head.partition("=")
    if not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise argparse.ArgumentTypeError(f"key[=value]:NoSchedule|NoExecute, not {text!r}")
    return {"key": key, "effect": effect, **({"value": value} if value else {})}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("sim", help="the simulated GPU cluster")
    sub = parser.add_subparsers(dest="sim_command", metavar="ACTION", required=True)

    run = sub.add_parser("serve", help="serve the Kubernetes, node-pool, metrics and inject APIs")
    run.add_argument("--nodes", type=int, default=4, help="GPU nodes to seed (default 4)")
    run.add_argument("--gpus-per-node", type=int, default=8)
    run.add_argument(
        "--topology",
        choices=TOPOLOGIES,
        default="default",
        help="default: two pools of 8-GPU nodes (--nodes, --gpus-per-node); nvl72: --racks GB200 "
        "NVL72 racks of 18 four-GPU trays in one NVLink domain each, one gang Job per clique",
    )
    run.add_argument(
        "--racks", type=positive, default=1, help="NVL72 racks (--topology nvl72; default 1)"
    )
    run.add_argument(
        "--cliques-per-rack",
        type=positive,
        default=1,
        metavar="K",
        help="split each rack's trays into K NVLink partitions (cliques; default 1)",
    )
    run.add_argument(
        "--spare-trays",
        type=int,
        default=2,
        metavar="S",
        help="the last S trays of each rack are spares: labelled and tainted "
        "remediator.io/spare=true:NoSchedule (default 2)",
    )
    run.add_argument("--kubeconfig", type=Path, required=True, help="where to write the kubeconfig")
    run.add_argument(
        "--ready-file",
        type=Path,
        required=True,
        help="written (JSON with every URL and the pid) once all endpoints answer",
    )
    run.add_argument(
        "--provision-delay",
        type=float,
        default=3.0,
        help="seconds a replacement node takes to be provisioned",
    )
    run.add_argument(
        "--reboot-delay",
        type=float,
        default=5.0,
        help="seconds a rebooted node stays NotReady before it is back with a new boot id",
    )
    run.add_argument("--host", default="127.0.0.1")
    for name in ("kube", "nodepool", "metrics", "inject"):
        run.add_argument(f"--{name}-port", type=int, default=0, help="default: a free port")
    run.add_argument(
        "--tick-interval", type=float, default=0.1, help="seconds between simulation steps"
    )
    run.add_argument(
        "--namespace",
        action="append",
        dest="namespaces",
        metavar="NAME",
        help="a namespace to create besides the fleet's (repeatable; default: remediator)",
    )
    run.add_argument(
        "--node-root",
        type=Path,
        help="give each node a host directory here (DIR/NODE/dev/kmsg, DIR/NODE/proc/driver/"
        "nvidia/gpus/…) that injected faults write into, for node agents to read",
    )
    run.add_argument(
        "--cloud",
        choices=CLOUDS,
        default="http",
        help="whose API replaces nodes: the generic node-pool contract (default) or a platform's",
    )
    run.add_argument(
        "--slurm",
        action="store_true",
        help="also run a real Slurm (Debian's slurmctld, one slurmd per node, munge) named after "
        "the nodes; the ready file's `slurm` object is valid as the controller's `slurm:`",
    )
    run.add_argument(
        "--rbac",
        nargs="?",
        const=DEFAULT_RBAC,
        type=Path,
        metavar="DIR",
        help="enforce the ClusterRoles/Roles and bindings in DIR (a Kustomize directory, YAML "
        "files, or one file; default the project's deploy/base, with deploy/components/clusterapi "
        "for --cloud clusterapi) for requests carrying a ServiceAccount token this simulator "
        "issues (the ready file's `service_accounts`); other requests stay unrestricted",
    )
    run.add_argument(
        "--doa-rate",
        type=doa_rate,
        default=0.0,
        metavar="R",
        help="the fraction (0-1) of new nodes a cloud adds that arrive dead: an XID 79 or a GPU "
        "missing, a slow NVLink, an InfiniBand port down or another driver (default 0)",
    )
    run.add_argument(
        "--program-time-scale",
        type=time_scale,
        default=1.0,
        metavar="F",
        help="multiply the run times of the programs Jobs run on nodes (dcgmi diag, "
        "all_reduce_perf, nvidia-smi, ibstat, a GPU reset) by F; default 1, as the demo runs",
    )
    run.add_argument(
        "--startup-taint",
        type=taint,
        action="append",
        dest="startup_taints",
        metavar="KEY[=VALUE]:EFFECT",
        help="a taint every machine a cloud adds registers with, on every --cloud (the kubelet's "
        "--register-with-taints, which each platform's node template sets; repeatable)",
    )
    run.set_defaults(func=_serve)

    inject = sub.add_parser("inject", help="inject a fault into a running simulator")
    inject_module.add_arguments(inject)
    inject.set_defaults(func=inject_module.run)


def _serve(args: argparse.Namespace) -> int:
    if args.topology == "nvl72":
        try:
            nvl72.layout(args.racks, args.cliques_per_rack, args.spare_trays)
        except ValueError as exc:
            raise SystemExit(f"sim serve: {exc}") from exc
    return serve(
        ServeOptions(
            nodes=args.nodes,
            gpus_per_node=args.gpus_per_node,
            kubeconfig=args.kubeconfig,
            ready_file=args.ready_file,
            provision_delay=args.provision_delay,
            reboot_seconds=args.reboot_delay,
            host=args.host,
            kube_port=args.kube_port,
            nodepool_port=args.nodepool_port,
            metrics_port=args.metrics_port,
            inject_port=args.inject_port,
            tick_interval=args.tick_interval,
            namespaces=tuple(args.namespaces or ("remediator",)),
            node_root=args.node_root.resolve() if args.node_root else None,
            cloud=args.cloud,
            slurm=args.slurm,
            rbac=args.rbac,
            doa_rate=args.doa_rate,
            program_time_scale=args.program_time_scale,
            topology=args.topology,
            racks=args.racks,
            cliques_per_rack=args.cliques_per_rack,
            spare_trays=args.spare_trays,
            startup_taints=tuple(args.startup_taints or ()),
        )
    )

"""`remediator sim serve`: the whole simulated cluster in one process — the Kubernetes API, the
cloud node-pool API, the telemetry endpoint and fault injection, each on its own loopback port —
plus the kubeconfig and a ready file that tests and demos wait for. With `--rbac` the Kubernetes
API speaks TLS (a CA made at start, in every kubeconfig it writes), as a real apiserver does: stock
kubectl sends a kubeconfig's token over TLS only.

Each uvicorn server runs in its own thread (uvicorn only installs signal handlers on the main
thread), so the main thread owns SIGINT/SIGTERM and stops them all together.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import httpx
import uvicorn
import yaml
from starlette.types import ASGIApp

from remediator.sim import fleet, nvl72
from remediator.sim.kube.api.faults import KubeFaultMiddleware, KubeFaults
from remediator.sim.kube.api.rbac import Rbac, load_manifests
from remediator.sim.kube.api.rbac_http import RbacMiddleware
from remediator.sim.kube.api.server import create_kube_app
from remediator.sim.kube.api.store import ObjectStore
from remediator.sim.kube.api.tls import ServingCert, issue
from remediator.sim.kube.controllers.cluster import SimCluster
from remediator.sim.launch import DEFAULT_RBAC, DEPLOY
from remediator.sim.node.gfd import version_labels
from remediator.sim.services import build_cloud_apps
from remediator.sim.slurm.machines import SimSlurm

CONTEXT = "remediator-sim"
READY_TIMEOUT = 180.0
KEEP_ALIVE = 120


@dataclass(frozen=True)
class ServeOptions:
    nodes: int
    gpus_per_node: int
    kubeconfig: Path
    ready_file: Path
    provision_delay: float = 3.0
    reboot_seconds: float = 5.0
    host: str = "127.0.0.1"
    kube_port: int = 0
    nodepool_port: int = 0
    metrics_port: int = 0
    inject_port: int = 0
    tick_interval: float = 0.1
    namespaces: tuple[str, ...] = ("remediator",)
    node_root: Path | None = None  # per-node kernel log and driver files, for node agents
    cloud: str = "http"
    slurm: bool = False  # a real slurmctld + one slurmd per node, beside the cluster
    rbac: Path | None = None  # RBAC manifests to enforce for the ServiceAccounts' tokens
    doa_rate: float = 0.0  # the fraction of new nodes that arrive with a hardware fault
    program_time_scale: float = 1.0  # multiplies the host programs' run times (DCGM, NCCL…)
    topology: str = "default"  # or "nvl72": racks of GB200 trays (sim/nvl72.py)
    racks: int = 1
    cliques_per_rack: int = 1
    spare_trays: int = 2
    # What every new machine registers with (kubelet --register-with-taints), on every cloud.
    startup_taints: tuple[dict[str, str], ...] = ()


def bind(host: str, port: int) -> socket.socket:
    # proto must be IPPROTO_TCP: asyncio only sets TCP_NODELAY on accepted sockets that say
    # so, and without it every small response waits out the peer's delayed ACK (~40 ms).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def url_of(sock: socket.socket, scheme: str = "http") -> str:
    host, port = sock.getsockname()[:2]
    return f"{scheme}://{host}:{port}"


def kubeconfig(
    server: str, token: str, namespace: str = "default", ca_pem: bytes | None = None
) -> dict[str, object]:
    cluster: dict[str, str] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": cluster}],
        "users": [{"name": CONTEXT, "user": {"token": token}}],
        "contexts": [
            {
                "name": CONTEXT,
                "context": {"cluster": CONTEXT, "user": CONTEXT, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT,
        "preferences": {},
    }


def write_atomically(path: Path, text: str) -> None:
    """Readers poll for these files: they must never see half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


class AppServers:
    """uvicorn servers on already-bound sockets, one thread each."""

    def __init__(self) -> None:
        self._servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(
        self, app: ASGIApp, sock: socket.socket, tls: tuple[Path, Path] | None = None
    ) -> None:
        """`tls`: the certificate chain and key files to serve HTTPS with."""
        # Clients keep connections idle between retries (kubectl drain waits 5 s after a 429);
        # uvicorn's 5 s default would close them under a POST in flight, which Go reports as
        # EOF and does not retry. A real API server keeps idle connections far longer.
        config = uvicorn.Config(
            app,
            log_level="warning",
            lifespan="off",
            access_log=False,
            timeout_keep_alive=KEEP_ALIVE,
            timeout_graceful_shutdown=2,
            ssl_certfile=tls[0] if tls else None,
            ssl_keyfile=tls[1] if tls else None,
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(
            target=server.run,
            kwargs={"sockets": [sock]},
            daemon=True,
            name=f"uvicorn-{sock.getsockname()[1]}",
        )
        thread.start()
        self._servers.append((server, thread))

    def stop(self) -> None:
        for server, _ in self._servers:
            server.should_exit = True
        for _, thread in self._servers:
            thread.join(timeout=10)

    def alive(self) -> bool:
        return all(thread.is_alive() for _, thread in self._servers)


def wait_answering(
    urls: list[str],
    deadline: float,
    alive: Callable[[], bool],
    ca_pem: bytes | None = None,
) -> None:
    """Until every URL answers HTTP at all (any status: the point is that it is serving);
    HTTPS ones verified against `ca_pem`."""
    pending = list(urls)
    verify = ssl.create_default_context(cadata=ca_pem.decode()) if ca_pem else True
    with httpx.Client(timeout=2.0, verify=verify) as client:
        while pending:
            if not alive():
                raise RuntimeError("a server thread died during start-up")
            if time.monotonic() > deadline:
                raise TimeoutError(f"not answering: {', '.join(pending)}")
            try:
                client.get(pending[0])
                pending.pop(0)
            except httpx.TransportError:
                time.sleep(0.05)


def add_namespaces(store: ObjectStore, names: tuple[str, ...]) -> None:
    """Namespaces an installation would have created (remediator's own, for its Lease)."""
    for name in names:
        if store.find("namespaces", "", name) is None:
            store.create(
                "namespaces",
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                    "spec": {"finalizers": ["kubernetes"]},
                    "status": {"phase": "Active"},
                },
            )


def load_rbac(options: ServeOptions) -> Rbac | None:
    if options.rbac is None:
        return None
    components = (
        [DEPLOY / "components" / "clusterapi"]
        if options.cloud == "clusterapi" and options.rbac.resolve() == DEFAULT_RBAC
        else []
    )
    return Rbac.from_objects(load_manifests(options.rbac, components), "remediator")


def write_serving_files(cert: ServingCert, directory: Path) -> tuple[Path, Path]:
    """The chain and key files uvicorn loads (it takes paths only); the key readable by us only."""
    chain, key = directory / "apiserver.crt", directory / "apiserver.key"
    chain.write_bytes(cert.cert_pem)
    key.touch(mode=0o600)
    key.write_bytes(cert.key_pem)
    return chain, key


def serve(options: ServeOptions) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    options.ready_file.unlink(missing_ok=True)  # present exactly while this process serves
    cluster = SimCluster()
    racks = (
        nvl72.layout(options.racks, options.cliques_per_rack, options.spare_trays)
        if options.topology == "nvl72"
        else []
    )
    cluster.set_feature_labels(version_labels())
    if racks:
        cluster.seed(nvl72.plan(options.racks, options.cliques_per_rack, options.spare_trays))
    else:
        cluster.seed(fleet.plan(options.nodes, options.gpus_per_node))
    cluster.set_startup_taints([dict(t) for t in options.startup_taints])
    add_namespaces(cluster.store, options.namespaces)
    token = secrets.token_urlsafe(24)
    rbac = load_rbac(options)
    kube_faults = KubeFaults()
    cloud = build_cloud_apps(
        cluster,
        provision_delay=options.provision_delay,
        node_root=options.node_root,
        kube_faults=kube_faults,
        reboot_seconds=options.reboot_seconds,
        doa_rate=options.doa_rate,
        program_time_scale=options.program_time_scale,
        racks=racks or None,
    )
    socks = {
        "kube_url": bind(options.host, options.kube_port),
        "nodepool_url": bind(options.host, options.nodepool_port),
        "metrics_url": bind(options.host, options.metrics_port),
        "inject_url": bind(options.host, options.inject_port),
    }
    apps: dict[str, ASGIApp] = {
        "kube_url": KubeFaultMiddleware(
            RbacMiddleware(create_kube_app(cluster), rbac, kube_faults.refused, admin_token=token),
            kube_faults,
            lambda: cluster.store.resource_version,
        ),
        "nodepool_url": cloud.nodepool,
        "metrics_url": cloud.metrics,
        "inject_url": cloud.inject,
    }
    urls = {key: url_of(sock) for key, sock in socks.items()}
    # RBAC means tokens, and kubectl sends a token only over TLS.
    serving = issue(options.host) if rbac else None
    private = tempfile.TemporaryDirectory(prefix="remediator-sim-tls-") if serving else None
    tls = write_serving_files(serving, Path(private.name)) if serving and private else None
    if serving:
        urls["kube_url"] = url_of(socks["kube_url"], "https")
    ca_pem = serving.ca_pem if serving else None
    provider: dict[str, object] = {"type": "http", "url": urls["nodepool_url"]}
    servers = AppServers()
    cluster.start(options.tick_interval)
    slurm = SimSlurm(cluster.store, options.ready_file.parent / "slurm") if options.slurm else None
    stops: list[Callable[[], None]] = []
    try:
        if options.cloud == "aws":
            from remediator.sim.cloud.aws import start_aws  # moto: only when asked for

            aws = start_aws(cluster, options.provision_delay, reboot=cloud.reboot)
            stops.append(aws.stop)
            socks["aws_url"] = bind(options.host, 0)
            urls["aws_url"] = url_of(socks["aws_url"])
            apps["aws_url"] = aws.app
            provider = aws.provider(urls["aws_url"])
        elif options.cloud == "clusterapi":
            from remediator.sim.cloud.clusterapi import provider_setting, start_clusterapi

            start_clusterapi(cluster, options.provision_delay, reboot=cloud.reboot)
            provider = provider_setting()
        elif options.cloud == "gce":
            from remediator.sim.cloud.gce import start_gce

            gce = start_gce(cluster, options.provision_delay, reboot=cloud.reboot)
            socks["gce_url"] = bind(options.host, 0)
            urls["gce_url"] = url_of(socks["gce_url"])
            apps["gce_url"] = gce.app
            provider = gce.provider(urls["gce_url"])
        extra = slurm.start() if slurm else {}
        for key, sock in socks.items():
            servers.start(apps[key], sock, tls if key == "kube_url" else None)
        ca_file: dict[str, str] = {}
        if ca_pem:
            ca_path = options.kubeconfig.with_name("kube-ca.crt")
            write_atomically(ca_path, ca_pem.decode())
            ca_file["kube_ca"] = str(ca_path)
        write_atomically(
            options.kubeconfig,
            yaml.safe_dump(kubeconfig(urls["kube_url"], token, ca_pem=ca_pem)),
        )
        probes = [
            urls["kube_url"] + "/version",
            urls["nodepool_url"] + "/",
            # The root, not /metrics: rendering 10,000 nodes of telemetry is no liveness probe.
            urls["metrics_url"] + "/",
            urls["inject_url"] + "/",
        ]
        wait_answering(probes, time.monotonic() + READY_TIMEOUT, servers.alive, ca_pem)
        node_root = {"node_root": str(options.node_root)} if options.node_root else {}
        # Each bound ServiceAccount's token and a kubeconfig that uses it.
        accounts: dict[str, object] = {}
        for account, account_token in (rbac.accounts() if rbac else {}).items():
            namespace, name = account.split("/", 1)
            path = options.kubeconfig.with_name(f"kubeconfig-{namespace}-{name}")
            config = kubeconfig(urls["kube_url"], account_token, namespace, ca_pem)
            write_atomically(path, yaml.safe_dump(config))
            accounts[account] = {"token": account_token, "kubeconfig": str(path)}
        ready = {
            **urls,
            **ca_file,
            **node_root,
            "provider": provider,
            "cloud": options.cloud,
            "topology": options.topology,
            **extra,
            **({"service_accounts": accounts} if rbac else {}),
            "pid": os.getpid(),
        }
        write_atomically(options.ready_file, json.dumps(ready))
        while not stop.wait(0.5):
            if not servers.alive():
                return 1
        return 0
    finally:
        options.ready_file.unlink(missing_ok=True)
        servers.stop()
        if private:
            private.cleanup()
        for stop_cloud in stops:
            stop_cloud()
        cluster.stop()
        if slurm:
            slurm.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)

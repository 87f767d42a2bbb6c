"""`remediator demo --clusters N`: N simulated clusters, one controller each, and one fleet
console, all on one database: PostgreSQL when its server binaries are installed (the demo runs
its own server in the data directory), else one SQLite file in WAL mode shared by every process.
The banner says which database it is and which console, simulator and log belong to which
cluster.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import yaml

from remediator.demo.config import ControllerInputs, controller_settings
from remediator.demo.policies import DemoTimings, find_policies_dir, write_demo_policies
from remediator.demo.relay import Relay
from remediator.demo.scenario import GUARDED_NAMESPACE, ScenarioRunner
from remediator.demo.status import StatusReporter
from remediator.demo.supervisor import (
    DEFAULT_PORT,
    START_TIMEOUT,
    Demo,
    DemoError,
    DemoOptions,
    console_port,
    remediator_argv,
    wait_for_json,
    write_private,
)
from remediator.store import db

CLUSTER_NAMES = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")
MAX_CLUSTERS = len(CLUSTER_NAMES)


def pg_binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def free_local_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class ClusterParts:
    name: str
    kubeconfig: Path
    inject_url: str
    console_url: str
    log: Path


class FleetDemo(Demo):
    def __init__(self, options: DemoOptions, clusters: int, database: str = "auto") -> None:
        super().__init__(options)
        self.database = database
        if not 2 <= clusters <= MAX_CLUSTERS:
            raise DemoError(f"--clusters: between 2 and {MAX_CLUSTERS}, got {clusters}")
        self.names = CLUSTER_NAMES[:clusters]
        self.scratch: list[Path] = []
        self.database_text = ""

    # -- the database ------------------------------------------------------------------------

    def _database(self) -> str | None:
        """The shared database's URL, migrated; None when stopped meanwhile."""
        initdb, postgres = pg_binary("initdb"), pg_binary("postgres")
        if self.database == "postgresql" and (initdb is None or postgres is None):
            raise DemoError("--database postgresql: no PostgreSQL server binaries (initdb)")
        if self.database == "sqlite" or initdb is None or postgres is None:
            why = "as asked" if self.database == "sqlite" else "no PostgreSQL server binaries found"
            path = self.data_dir / "fleet.db"
            url = f"sqlite:///{path}"
            db.upgrade(url)
            self.database_text = (
                f"SQLite {path} in WAL mode, shared by every controller and the console "
                f"({why}; production uses PostgreSQL)"
            )
            return url
        root = self.data_dir / "postgres"
        run_as: list[str] = []
        if os.geteuid() == 0:
            # PostgreSQL refuses to run as root: its own user runs it, from a directory of its
            # own (the data directory's parents need not be open to it); removed at the end.
            root = Path(tempfile.mkdtemp(prefix="remediator-demo-pg-"))
            shutil.chown(root, "postgres", "postgres")
            self.scratch.append(root)
            run_as = ["runuser", "-u", "postgres", "--"]
        data = root / "data"
        if not data.exists():
            self.say("initialising a PostgreSQL server for the fleet…")
            initdb_argv = [initdb, "-D", str(data), "-A", "trust", "-U", "postgres"]
            initdb_child = self._child("initdb", [*run_as, *initdb_argv, "-E", "UTF8", "--no-sync"])
            assert initdb_child.proc is not None
            if initdb_child.proc.wait(timeout=START_TIMEOUT) != 0:
                raise DemoError(f"initdb failed:\n{initdb_child.log_tail()}")
            self.children.remove(initdb_child)
        port = free_local_port()
        server = self._child(
            "postgres",
            [
                *run_as, postgres, "-D", str(data), "-p", str(port), "-k", str(root),
                "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
            ],
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                with psycopg.connect(
                    host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True
                ) as conn:
                    found = conn.execute(
                        "SELECT 1 FROM pg_database WHERE datname = 'remediator'"
                    ).fetchone()
                    if found is None:
                        conn.execute("CREATE DATABASE remediator")
                break
            except psycopg.OperationalError:
                if not server.alive():
                    raise DemoError(f"PostgreSQL exited:\n{server.log_tail()}") from None
                if time.monotonic() > deadline or self.stop.wait(0.2):
                    return None
        url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/remediator"
        db.upgrade(url)
        self.database_text = (
            f"PostgreSQL at {url} (a server the demo runs, data in {data}), shared by every "
            "controller and the console"
        )
        return url

    def shutdown(self) -> None:
        super().shutdown()
        for path in self.scratch:
            shutil.rmtree(path, ignore_errors=True)

    # -- start-up ----------------------------------------------------------------------------

    def start(self) -> bool:
        opts = self.options
        port = console_port(opts.host, opts.port)
        if opts.port is None and port != DEFAULT_PORT:
            self.say(f"port {DEFAULT_PORT} is taken: the fleet console gets a free port instead")
        url = self._database()
        if url is None:
            return False
        token = secrets.token_urlsafe(24)
        write_private(self.data_dir / "operator-token", token + "\n")
        source = opts.policies or find_policies_dir()
        parts: list[ClusterParts] = []
        for index, name in enumerate(self.names):
            found = self._start_cluster(name, index, url, token, source)
            if found is None:
                return False
            parts.append(found)

        self.say("starting the fleet console…")
        fleet_config = self.data_dir / "fleet-console.yaml"
        settings: dict[str, Any] = {
            "database_url": url,
            "web": {"listen": f"{opts.host}:{port}", "operator_tokens": [token]},
            "log_format": "text",
        }
        write_private(fleet_config, yaml.safe_dump(settings, sort_keys=False))
        ready_file = self.data_dir / "fleet-console-ready.json"
        ready_file.unlink(missing_ok=True)
        console = self._child(
            "fleet-console",
            remediator_argv(
                "console", "--config", str(fleet_config), "--ready-file", str(ready_file)
            ),
        )
        ready = wait_for_json(ready_file, console, self.stop)
        if ready is None:
            return False
        self._fleet_banner(str(ready["web_url"]), token, parts, fleet_config)
        return True

    def _start_cluster(
        self, name: str, index: int, url: str, token: str, source: Path
    ) -> ClusterParts | None:
        opts = self.options
        home = self.data_dir / name
        home.mkdir(exist_ok=True)
        self.say(f"starting cluster {name}: a simulated GPU cluster of {opts.nodes} nodes…")
        sim_ready = home / "sim-ready.json"
        sim_ready.unlink(missing_ok=True)
        kubeconfig = home / "kubeconfig"
        sim = self._child(
            f"{name}-sim",
            remediator_argv(
                "sim", "serve",
                "--nodes", str(opts.nodes),
                "--provision-delay", str(opts.provision_delay),
                "--kubeconfig", str(kubeconfig),
                "--ready-file", str(sim_ready),
                "--namespace", "remediator",
                "--namespace", GUARDED_NAMESPACE,
            ),
        )  # fmt: skip
        urls = wait_for_json(sim_ready, sim, self.stop)
        if urls is None:
            return None
        policies_dir = home / "policies"
        write_demo_policies(source, policies_dir, DemoTimings())
        settings = controller_settings(
            ControllerInputs(
                kubeconfig=kubeconfig,
                policies_dir=policies_dir,
                database_path=home / "unused.db",
                nodepool_url=urls["nodepool_url"],
                host=opts.host,
                port=0,
                operator_token=token,
                provider=urls.get("provider"),
            )
        )
        settings["cluster_name"] = name
        settings["database_url"] = url
        config = home / "remediator.yaml"
        write_private(config, yaml.safe_dump(settings, sort_keys=False))
        self.say(f"starting cluster {name}'s controller…")
        ready_file = home / "controller-ready.json"
        ready_file.unlink(missing_ok=True)
        controller = self._child(
            f"{name}-controller",
            remediator_argv("run", "--config", str(config), "--ready-file", str(ready_file)),
        )
        ready = wait_for_json(ready_file, controller, self.stop)
        if ready is None:
            return None
        console = str(ready["web_url"])
        self._thread(f"{name}-relay", Relay(urls["metrics_url"], console, token).run)
        self._thread(f"{name}-status", StatusReporter(console, token, self._teller(name)).run)
        if opts.faults:
            scenario = ScenarioRunner(
                kubeconfig,
                urls["inject_url"],
                # The clusters take turns: the fleet sees a fault every interval, not N.
                interval=opts.fault_interval * len(self.names),
                seed=None if opts.seed is None else opts.seed + index,
                say=self._teller(name),
            )
            self._thread(f"{name}-scenario", scenario.run)
        return ClusterParts(
            name, kubeconfig, urls["inject_url"], console, self.logs / f"{name}-controller.log"
        )

    def _teller(self, name: str) -> Any:
        def say(text: str) -> None:
            self.say(f"{name}: {text}")

        return say

    def _fleet_banner(
        self, console: str, token: str, parts: list[ClusterParts], config: Path
    ) -> None:
        token_file = self.data_dir / "operator-token"
        lines = [
            "",
            f"remediator fleet demo is running: {len(parts)} clusters, one database",
            f"  fleet console  {console}/fleet   (no kubeconfig: it reads only the database)",
            f"  token          {token}",
            f"                 (operator token for every console; also in {token_file})",
            f'  API            curl -H "Authorization: Bearer $(cat {token_file})" '
            f"{console}/api/v1/clusters",
            f"  database       {self.database_text}",
            f"  config         {config}",
            "  signals        each cluster's simulated DCGM readings are relayed to its own "
            "controller's push API",
        ]
        for part in parts:
            lines += [
                f"  cluster {part.name}",
                f"    controller console  {part.console_url}/   log {part.log}",
                f"    kubectl             kubectl --kubeconfig {part.kubeconfig} get nodes",
                f"    inject              remediator sim inject --url {part.inject_url} "
                "--node NODE --gpu 0 --xid 79",
            ]
        lines += [f"  logs           {self.logs}/", "Press Ctrl-C to stop everything.", ""]
        self.show("\n".join(lines))

"""The soak's own PostgreSQL (or SQLite file): a throwaway server it may stop and start.

The test suite's session server (tests/fixtures/postgres.py, whose recipe this follows: initdb
as the postgres user, trust auth, loopback only, a socket in the server's own directory) cannot
be taken down mid-session, and the `db_outage` fault does exactly that: `pg_ctl stop -m fast`,
then a start with the same options on the same port.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from remediator.store.db import upgrade

START_TIMEOUT = 120


def pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Postgres:
    """One server under a fresh temporary directory; `url(db)` for the controllers."""

    def __init__(self) -> None:
        initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise RuntimeError(
                "PostgreSQL (initdb, pg_ctl) is not installed: --db sqlite, or "
                "scripts/setup.sh --system"
            )
        self.pg_ctl = pg_ctl
        self.root = Path(tempfile.mkdtemp(prefix="soak-pg-"))
        self.run_as: list[str] = []
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            shutil.chown(self.root, "postgres", "postgres")
            self.run_as = ["runuser", "-u", "postgres", "--"]
        self.data = self.root / "data"
        subprocess.run(
            [*self.run_as, initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres",
             "-E", "UTF8", "--locale=C", "--no-sync"],
            check=True,
            capture_output=True,
        )  # fmt: skip
        self.port = free_port()
        self.start()

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.run_as, self.pg_ctl, "-D", str(self.data), *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT + 30,
        )

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        done = self._pg_ctl(
            "-o", options, "-l", str(self.root / "log"), "-w", "-t", str(START_TIMEOUT), "start"
        )
        if done.returncode != 0:
            raise RuntimeError(f"PostgreSQL did not start:\n{done.stderr}{self.log_tail()}")

    def stop(self, mode: str = "fast") -> None:
        done = self._pg_ctl("-m", mode, "-w", "stop")
        if done.returncode != 0:
            raise RuntimeError(f"pg_ctl stop -m {mode} failed:\n{done.stderr}")

    def running(self) -> bool:
        return self._pg_ctl("status").returncode == 0

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str, wait: float = 90.0) -> str:
        """A new database at the head revision; waits for the server when it is down (a
        `db_outage` may be under way)."""
        deadline = time.monotonic() + wait
        while True:
            try:
                with psycopg.connect(
                    host="127.0.0.1", port=self.port, user="postgres", dbname="postgres",
                    autocommit=True, connect_timeout=5,
                ) as conn:  # fmt: skip
                    conn.execute(f'CREATE DATABASE "{name}"')
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)
        url = self.url(name)
        upgrade(url)
        return url

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = (self.root / "log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def destroy(self) -> None:
        self._pg_ctl("-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)


def sqlite_database(directory: Path, name: str) -> str:
    url = f"sqlite:///{directory / (name + '.db')}"
    upgrade(url)
    return url

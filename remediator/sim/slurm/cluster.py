"""Start one real slurmctld and one `slurmd -N NAME` per simulated node, side by side on this
machine, under a private munged (own key and socket), all in one directory with absolute paths.

Nothing here imitates Slurm: these are Debian's daemons. What the launcher owns is the layout —
`NodeHostname=localhost` and a distinct `Port=` per node so several slurmd share one host — and
the lifecycle: start quickly, wait until every node answers IDLE, stop every process it started
(and nothing else: a shell with this SLURM_CONF exported is its user's), reap a daemon that died.
The `settings()` it returns is valid as the controller's `slurm:` section.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PARTITION = "gpu"
START_TIMEOUT = 60.0
# Cancelled jobs' steps end within KillWait (5 s) once slurmd hears of it.
STOP_TIMEOUT = 30.0
# slurmscriptd is slurmctld's own helper (forked at its start, gone with it); counted as a job
# process, it kept end_jobs waiting its whole timeout at every stop.
DAEMONS = frozenset({"slurmctld", "slurmscriptd", "slurmd", "munged"})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def slurm_conf(
    root: Path, short: Path, nodes: Sequence[str], ports: dict[str, int], ctld_port: int
) -> str:
    """The configuration: root runs everything, state and logs under `root`, fast timers so a
    restarted slurmctld and requeued jobs come back within seconds."""
    lines = [
        "ClusterName=remediator",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        # cred_expire is also how long a requeued job waits before it may start again (default
        # 120 s); short here so that a requeued job runs again within seconds.
        f"AuthInfo=socket={short / 'munge.socket'},cred_expire=10",
        f"StateSaveLocation={root / 'ctld-state'}",
        # slurmstepd's sockets live here: Unix socket paths must fit in 108 bytes.
        f"SlurmdSpoolDir={short / 'spool' / '%n'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=1",
        "JobRequeue=0",
        "KillWait=5",
        "MinJobAge=300",
        "SlurmctldTimeout=10",
        # Generous under load (tests share two cores with many processes): a batch launch that
        # times out is requeued and held, which would look like a lost job.
        "SlurmdTimeout=120",
        "MessageTimeout=20",
        "BatchStartTimeout=60",
        "InactiveLimit=0",
        "SchedulerParameters=sched_interval=1,bf_interval=1",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MailProg=/bin/true",
    ]
    for name in nodes:
        lines.append(
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports[name]} "
            # A feature for jobs to ask for, as sites do to let a job opt out of remediation.
            "CPUs=1 RealMemory=100 Features=gpu,no-remediation State=UNKNOWN"
        )
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class DaemonExit:
    """A daemon of the cluster that exited without being asked to."""

    key: str  # "slurmctld", "munged", "slurmd:NODE"
    pid: int
    returncode: int
    log: Path

    def describe(self) -> str:
        how = (
            f"killed by {signal.Signals(-self.returncode).name}"
            if self.returncode < 0
            else f"with status {self.returncode}"
        )
        return f"{self.key.replace(':', ' ')} exited (pid {self.pid}) {how}; see {self.log}"


def process_table() -> dict[int, tuple[str, int]]:
    """pid → (comm, session id) of every live process (zombies left out)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # comm, not argv: slurmscriptd's argv is its process title (": slurmscriptd").
            name = (entry / "comm").read_text().strip()
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X"):
            table[int(entry.name)] = (name, int(fields[3]))
    return table


def open_files(pid: int) -> list[str]:
    """What a process holds open; a descriptor closed while we look is left out."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return []
    files = []
    for fd in fds:
        with contextlib.suppress(OSError):
            files.append(os.readlink(fd))
    return files


@dataclass
class SlurmCluster:
    """A running Slurm: `conf` is the absolute slurm.conf path for every client."""

    root: Path
    nodes: tuple[str, ...]
    conf: Path = field(init=False)
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, init=False)
    _ports: dict[str, int] = field(default_factory=dict, init=False)
    # Every session this cluster's processes lead: each daemon's (started in its own) and each
    # slurmstepd's (it calls setsid; its tasks stay in it after it is gone).
    _sessions: set[int] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.conf = self.root / "slurm.conf"
        # Unix socket paths (munge's, slurmstepd's in the spool) must fit in 108 bytes; a test's
        # temporary directory may not.
        self.socket_dir = Path(tempfile.mkdtemp(prefix="slurm-"))
        self.munge_socket = self.socket_dir / "munge.socket"

    @property
    def env(self) -> dict[str, str]:
        """For every client command: this cluster's slurm.conf, and a job's output file under
        `jobs/` unless it names one (sbatch writes `slurm-N.out` into the submitter's working
        directory otherwise)."""
        output = str(self.root / "jobs" / "slurm-%j.out")
        return {
            **os.environ,
            "SLURM_CONF": str(self.conf),
            "SBATCH_OUTPUT": output,
            "SBATCH_ERROR": output,
        }

    def settings(self) -> dict[str, Any]:
        """Valid, as it stands, as the controller's `slurm:` settings."""
        return {"enabled": True, "slurm_conf": str(self.conf), "partition": PARTITION}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> SlurmCluster:
        for sub in ("munge", "ctld-state", "spool", "log", "jobs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for name in self.nodes:
            (self.socket_dir / "spool" / name).mkdir(parents=True, exist_ok=True)
        self._ports = {name: free_port() for name in self.nodes}
        self.conf.write_text(
            slurm_conf(self.root, self.socket_dir, self.nodes, self._ports, free_port())
        )
        self._start_munge()
        self.start_controller(clear=True)
        for name in self.nodes:
            self.start_node(name)
        self.wait_idle(self.nodes)
        return self

    def _start_munge(self) -> None:
        munge = self.root / "munge"
        key = munge / "munge.key"
        if not key.exists():
            subprocess.run(["mungekey", "-c", "-k", str(key)], check=True, capture_output=True)
        key.chmod(0o600)
        munge.chmod(0o700)
        self._spawn(
            "munged",
            [
                "munged",
                "-F",
                "--force",
                f"--key-file={key}",
                f"--socket={self.munge_socket}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
                f"--seed-file={munge / 'munged.seed'}",
            ],
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not self.munge_socket.exists():
            self._check_alive("munged")
            if time.monotonic() > deadline:
                raise TimeoutError("munged did not create its socket")
            time.sleep(0.05)

    def start_controller(self, *, clear: bool = False) -> None:
        # -i: ignore state files that cannot be read; -c (clear) only for a fresh start.
        args = ["slurmctld", "-D", "-f", str(self.conf), "-i"]
        if clear:
            args.append("-c")
        self._spawn("slurmctld", args)

    def stop_controller(self) -> None:
        self._stop("slurmctld")

    def start_node(self, name: str) -> None:
        self._spawn(f"slurmd:{name}", ["slurmd", "-D", "-f", str(self.conf), "-N", name])

    def stop_node(self, name: str) -> None:
        self._stop(f"slurmd:{name}")

    def stop(self) -> None:
        """Cancel every job and wait for its steps to end, then stop the daemons. slurmstepd and
        the job scripts are not children of anything we started (slurmd detaches them): stopping
        slurmd alone would leave them running. Whatever this cluster started that still runs
        after that (slurmctld was down, a step ignored SIGKILL's way out) is killed; a process
        that merely has this slurm.conf in its environment is not the cluster's."""
        self.end_jobs()
        for key in list(self._procs):
            if key.startswith("slurmd:"):
                self._stop(key)
        self._stop("slurmctld")
        self._stop("munged")
        for pid in self.processes(daemons=True):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.socket_dir, ignore_errors=True)

    def end_jobs(self, timeout: float = STOP_TIMEOUT) -> None:
        """Cancel every job; return once Slurm lists none and no step or job process is left."""
        # Whoever started the slurmctld that answers (a test may have restarted it): `scontrol
        # ping` says DOWN at once, where squeue would retry for MessageTimeout first.
        if self.run("scontrol", "ping", check=False).returncode != 0:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # %i: an array task as <array>_<task>; scancel refuses its raw id (%A) as invalid.
            listed = self.run("squeue", "-h", "-o", "%i", check=False)
            ids = listed.stdout.split()
            if ids:  # again while any is listed: a job being requeued ignores a cancel
                self.run("scancel", "--quiet", *sorted(set(ids)), check=False)
            elif listed.returncode == 0 and not self.processes():
                return
            time.sleep(0.5)

    def processes(self, *, daemons: bool = False) -> list[int]:
        """pids of what this cluster started that still runs: its steps and their tasks (and,
        with `daemons`, the daemons it spawned and their helpers). A slurmstepd is this
        cluster's when it holds a file of the cluster open (it blanks its environment for its
        process title, but keeps its node's log open); a task is its step's by session, which
        it keeps after its slurmstepd is gone."""
        table = process_table()
        spawned = {proc.pid for proc in self._procs.values()}
        roots = (f"{self.root}/", f"{self.socket_dir}/")
        for pid, (name, sid) in table.items():
            if name == "slurmstepd" and any(f.startswith(roots) for f in open_files(pid)):
                self._sessions.add(sid)
        return [
            pid
            for pid, (name, sid) in table.items()
            if sid in self._sessions
            and pid != os.getpid()
            and (daemons or (name not in DAEMONS and pid not in spawned))
        ]

    def reap(self) -> list[DaemonExit]:
        """Daemons that exited since the last look, waited for (no zombie is left behind) and
        forgotten; `_stop` forgets the ones stopped on purpose first."""
        exits = []
        for key, proc in list(self._procs.items()):
            if proc.poll() is not None:
                del self._procs[key]
                log = self.root / "log" / f"{key.replace(':', '-')}.log"
                exits.append(DaemonExit(key, proc.pid, proc.returncode, log))
        return exits

    # -- helpers -----------------------------------------------------------------------------

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (tests and the demo use it)."""
        return subprocess.run(
            list(args), env=self.env, capture_output=True, text=True, check=check, timeout=30
        )

    def node_states(self) -> dict[str, str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        states: dict[str, str] = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def wait_idle(self, names: Sequence[str], timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            states = self.node_states()
            if all(states.get(n, "").rstrip("*") == "idle" for n in names):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"Slurm nodes not idle: {states}")
            time.sleep(0.2)

    def reset(self) -> None:
        """Between tests: every job cancelled, every node resumed and idle."""
        for name in self.nodes:
            if f"slurmd:{name}" not in self._procs or self._procs[f"slurmd:{name}"].poll():
                self.start_node(name)
        deadline = time.monotonic() + START_TIMEOUT
        # Again while any is listed: a job being requeued (COMPLETING) ignores a cancel and
        # comes back PENDING.
        while ids := self.run("squeue", "-h", "-o", "%i", check=False).stdout.split():
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs {ids} did not end after scancel")
            self.run("scancel", "--quiet", *sorted(set(ids)), check=False)
            time.sleep(0.5)
        for name, state in self.node_states().items():
            if state.rstrip("*") != "idle":
                self.run("scontrol", "update", f"nodename={name}", "state=resume", check=False)
        self.wait_idle(self.nodes)

    def _spawn(self, key: str, args: list[str]) -> None:
        log = (self.root / "log" / f"{key.replace(':', '-')}.out").open("ab")
        proc = subprocess.Popen(
            args, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        self._procs[key] = proc
        self._sessions.add(proc.pid)

    def _check_alive(self, key: str) -> None:
        proc = self._procs[key]
        if proc.poll() is not None:
            raise RuntimeError(f"{key} exited with {proc.returncode}; see {self.root / 'log'}")

    def _stop(self, key: str) -> None:
        proc = self._procs.pop(key, None)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def available() -> bool:
    """Whether this machine has the Debian packages (scripts/setup.sh --system installs them)."""
    return all(shutil.which(b) for b in ("slurmctld", "slurmd", "sinfo", "munged", "mungekey"))

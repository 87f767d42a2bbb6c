"""A narrow adapter over Slurm's CLIs (`sinfo`/`squeue --json`, `scontrol`, `scancel`), the way
a controller in a pod with the Slurm client and a munge socket talks to slurmctld.

Library-style errors are wrapped here: slurmctld unreachable → TransientError (hold and retry,
never guess the jobs' fate); an unknown node or job → NotFoundError; permission denied or any
other refusal → PermanentError. `squeue --json` answers exit code 0 with an `errors` list when
slurmctld is down: an empty job list is only believed when `errors` is empty.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from remediator.errors import NotFoundError, PermanentError, TransientError
from remediator.slurm.hostlist import expand
from remediator.slurm.settings import SlurmSettings

UNREACHABLE = (
    "unable to contact slurm controller",
    "slurm_load_jobs",
    "slurm_load_node",
    "connection refused",
    "socket timed out",
    "communication connection failure",
    "zero bytes were transmitted",
)
# A command against a stopped slurmctld retries for MessageTimeout-ish seconds (19 s with the test
# cluster's 20) before it says so; `scontrol ping` says DOWN at once. A command that has not
# answered after this long asks `scontrol ping` and gives up if slurmctld is down.
PING_AFTER_SECONDS = 3.0
# Slurm's 32-bit NO_VAL markers (an unset array task id, for one).
NO_VAL = 0xFFFFFFFE
# Job states in which the job still occupies its nodes.
ON_NODE = frozenset({"RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "STOPPED", "SIGNALING"})


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # base state, lower case: idle, allocated, mixed, down, …
    flags: tuple[str, ...]  # DRAIN, NOT_RESPONDING, FAIL, …
    reason: str
    reason_user: str | None

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.flags

    @property
    def down(self) -> bool:
        return self.state == "down"

    @property
    def responding(self) -> bool:
        return "NOT_RESPONDING" not in self.flags

    @property
    def fenced(self) -> bool:
        """No new job lands here."""
        return self.drained or self.down or "FAIL" in self.flags

    def describe(self) -> str:
        text = "+".join([self.state.upper(), *self.flags])
        return f"{text} ({self.reason})" if self.reason else text


@dataclass(frozen=True)
class SlurmJob:
    """`id` addresses this job the way scancel/scontrol do: `8_3` for task 3 of array 8 (whose
    record may carry job_id 8: `8` alone would address every task), `20+1` for component 1 of
    heterogeneous job 20, else the job id. `whole` is what Slurm requeues or cancels as one: the
    array task, but a heterogeneous job as a whole (`scontrol requeue 20+1` is refused)."""

    id: str
    name: str
    state: str
    nodes: tuple[str, ...]
    requeue: bool
    comment: str
    features: str
    user: str
    whole: str = ""
    exit_code: int | None = None

    def __post_init__(self) -> None:
        if not self.whole:
            object.__setattr__(self, "whole", self.id)

    @property
    def on_node(self) -> bool:
        return self.state in ON_NODE

    def ended(self) -> str:
        """How a finished job ended, as Slurm says: `COMPLETED (exit 0)`, `FAILED (exit 3)`,
        `CANCELLED (signal 15)`."""
        code = self.exit_code
        if code is None:
            return self.state
        if code & 0x7F:
            return f"{self.state} (signal {code & 0x7F})"
        return f"{self.state} (exit {code >> 8})"


class SlurmClient(Protocol):
    """What remediator asks of Slurm. Mutations return Slurm's answer (stdout/stderr text)."""

    def nodes(self) -> list[SlurmNode]: ...
    def node(self, name: str) -> SlurmNode: ...
    def jobs(self) -> list[SlurmJob]: ...
    def set_node_state(self, name: str, state: str, reason: str | None = None) -> str: ...
    def signal_job(self, job_id: str, signal: str) -> str: ...
    def requeue_job(self, job_id: str) -> str: ...
    def allow_requeue(self, job_id: str) -> str: ...
    def cancel_job(self, job_id: str) -> str: ...


class SlurmCli:
    """`SlurmClient` over the CLIs with SLURM_CONF from the settings."""

    def __init__(self, settings: SlurmSettings) -> None:
        self._env = dict(os.environ)
        if settings.slurm_conf is not None:
            self._env["SLURM_CONF"] = str(settings.slurm_conf)
        self._timeout = settings.timeout_seconds
        self._partition = settings.partition

    def _run(self, args: Sequence[str], what: str, *, ping: bool = True) -> str:
        """Run one command; one that is slow to answer asks `scontrol ping`, and a DOWN
        slurmctld ends the wait at once instead of after the command's own retries."""
        try:
            proc = subprocess.Popen(
                list(args),
                env=self._env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except FileNotFoundError as exc:
            raise PermanentError(f"{what}: {args[0]} is not installed: {exc}") from exc
        deadline = time.monotonic() + self._timeout
        try:
            try:
                out, err = proc.communicate(timeout=min(PING_AFTER_SECONDS, self._timeout))
            except subprocess.TimeoutExpired:
                if ping:
                    with contextlib.suppress(PermanentError):  # ping's own trouble: wait on
                        self.ping(what)
                out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired as exc:
            raise TransientError(
                f"{what}: slurmctld unreachable: no answer within {self._timeout:.0f}s", 5.0
            ) from exc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        if proc.returncode != 0:
            raise classify(what, err.strip() or out.strip())
        return out.strip() or err.strip()

    def _json(self, args: Sequence[str], what: str) -> dict[str, Any]:
        text = self._run(args, what)
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PermanentError(f"{what}: not JSON from {args[0]}: {text[:200]}") from exc
        errors = data.get("errors") or []
        if errors:
            message = "; ".join(
                ": ".join(
                    str(x) for x in (e.get("source"), e.get("description"), e.get("error")) if x
                )
                for e in errors
            )
            # sinfo's JSON errors do not say why ("Unspecified error"): ask slurmctld directly.
            self.ping(what)
            raise classify(what, message)
        return dict(data)

    def ping(self, what: str = "ping slurmctld") -> None:
        """Raise TransientError when `scontrol ping` says slurmctld is DOWN."""
        try:
            self._run(["scontrol", "ping"], what, ping=False)
        except PermanentError as exc:
            if "down" in str(exc).lower():
                answer = str(exc).removeprefix(f"{what}: Slurm refused: ")
                raise TransientError(f"{what}: slurmctld unreachable: {answer}", 5.0) from exc
            raise

    def nodes(self) -> list[SlurmNode]:
        args = ["sinfo", "--json"]
        if self._partition:
            args += ["-p", self._partition]
        data = self._json(args, "list Slurm nodes")
        seen: dict[str, SlurmNode] = {}
        for raw in data.get("nodes", []):
            node = parse_node(raw)
            seen[node.name] = node
        return list(seen.values())

    def node(self, name: str) -> SlurmNode:
        for node in self.nodes():
            if node.name == name:
                return node
        raise NotFoundError(f"Slurm has no node {name}")

    def jobs(self) -> list[SlurmJob]:
        data = self._json(["squeue", "--json"], "list Slurm jobs")
        return [parse_job(raw) for raw in data.get("jobs", [])]

    def set_node_state(self, name: str, state: str, reason: str | None = None) -> str:
        args = ["scontrol", "update", f"nodename={name}", f"state={state}"]
        if reason is not None:
            args.append(f"reason={reason}")
        return self._run(args, f"set Slurm node {name} {state}") or "ok"

    def signal_job(self, job_id: str, signal: str) -> str:
        # --full: the batch script too, not only its steps (the script is what traps it).
        args = ["scancel", "--full", f"--signal={signal}", str(job_id)]
        return self._run(args, f"signal job {job_id} with SIG{signal}") or "ok"

    def requeue_job(self, job_id: str) -> str:
        return self._run(["scontrol", "requeue", str(job_id)], f"requeue job {job_id}") or "ok"

    def allow_requeue(self, job_id: str) -> str:
        args = ["scontrol", "update", f"jobid={job_id}", "requeue=1"]
        return self._run(args, f"allow requeue of job {job_id}") or "ok"

    def cancel_job(self, job_id: str) -> str:
        return self._run(["scancel", str(job_id)], f"cancel job {job_id}") or "ok"


def classify(what: str, message: str) -> Exception:
    """Slurm's answer → our error: unreachable is transient, the rest permanent."""
    message = one_line(message)
    low = message.lower()
    if any(marker in low for marker in UNREACHABLE):
        return TransientError(f"{what}: slurmctld unreachable: {message}", 5.0)
    if "invalid node name" in low or "invalid job id" in low:
        return NotFoundError(f"{what}: {message}")
    if ("access" in low and "denied" in low) or "permission" in low:
        return PermanentError(f"{what}: permission denied by Slurm: {message}")
    return PermanentError(f"{what}: Slurm refused: {message}")


def one_line(text: str) -> str:
    """Slurm's answer on one line: its `***` banners dropped, its lines joined."""
    lines = (line.strip() for line in text.splitlines())
    return "; ".join(line for line in lines if line and not line.startswith("*"))


def parse_node(raw: dict[str, Any]) -> SlurmNode:
    return SlurmNode(
        name=str(raw["name"]),
        state=str(raw.get("state", "unknown")).lower(),
        flags=tuple(str(f).upper() for f in raw.get("state_flags") or ()),
        reason=str(raw.get("reason") or ""),
        reason_user=raw.get("reason_set_by_user"),
    )


def _number(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value >= NO_VAL:
        return None
    return value


def job_address(raw: dict[str, Any]) -> tuple[str, str]:
    """(this job, what Slurm requeues as one): see `SlurmJob`."""
    array, task = _number(raw.get("array_job_id")), _number(raw.get("array_task_id"))
    if array and task is not None:
        return f"{array}_{task}", f"{array}_{task}"
    het, offset = _number(raw.get("het_job_id")), _number(raw.get("het_job_offset"))
    if het and offset is not None:
        return f"{het}+{offset}", str(het)
    return str(int(raw["job_id"])), str(int(raw["job_id"]))


def parse_job(raw: dict[str, Any]) -> SlurmJob:
    address, whole = job_address(raw)
    return SlurmJob(
        id=address,
        whole=whole,
        exit_code=_number(raw.get("exit_code")),
        name=str(raw.get("name", "")),
        state=str(raw.get("job_state", "")).upper(),
        nodes=tuple(expand(str(raw.get("nodes") or ""))),
        requeue=bool(raw.get("requeue")),
        comment=str(raw.get("comment") or ""),
        features=str(raw.get("features") or ""),
        user=str(raw.get("user_name") or ""),
    )

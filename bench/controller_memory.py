"""The controller's per-agent memory at N agents (issue 24: < 250 MB RSS at 10,000 agents), in
process: what each structure holds and what the process keeps.

What is built is what the heartbeat path builds, through its real parts: the bodies are
bench.scale_10k's (`heartbeat_body`: a bare-metal host, its DMI serial and 8 GPUs), parsed as the
heartbeat lane parses them (`HeartbeatIn.model_validate_json`) and answered by
`web.agents.take_heartbeat` over the intake the app builds (`web.intake.fill_intake`: a
`HeartbeatBook` on a `Repository`, `HardwareSightings` on a `Ledger`, `Admission`), on a migrated
SQLite database. Time is a fake clock, so the run is the same on a loaded machine: the first wave
(every agent once, whole identity, 1,000 a second as in scale_10k's start) then a steady wave
(every agent once more, digest only, at the default budget's 40 a second); each flush runs when the
book claims one (`claim_flush`, as the lane's background task does), here in line, so a failure
stops the bench. Then the book ticks until every identity is in the ledger. One agent of another
cluster goes through the whole path first, so what a running controller builds once (mappers,
compiled statements) is not counted as the agents'.

Two child processes each build it once: one under tracemalloc (started after the imports and the
database) for the traced total and its peak, and the bytes reachable from each structure
(`sys.getsizeof` over everything reachable from it, each object counted once, in the first
structure that reaches it: a node's name is the book's; an object without slots is counted
without the attribute storage Python keeps for it, so tracemalloc's total is the figure); one
without tracemalloc (its own bookkeeping is memory) for the RSS delta, its high-water mark, and
what glibc's `malloc_trim(0)` gives back at the end (what the heap kept of freed memory).

The bench checks it took the path it models and stops loudly otherwise: every heartbeat admitted
and answered 200, every node's row in the heartbeat table, every identity taken and flushed, each
node's machine and 8 open placements in the ledger's tables and in its picture.

Usage: python -m bench controller_memory [--nodes 10000]
Last line: `controller_memory: N agents X MB traced, Y MB RSS`.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import subprocess
import sys
import tempfile
import tracemalloc
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import Any

from prometheus_client import CollectorRegistry
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from bench.scale_10k import GPUS, bench_host, heartbeat_body
from remediator.clock import FakeClock
from remediator.errors import PolicyError
from remediator.ledger.sightings import HardwareSightings
from remediator.ledger.store import Ledger
from remediator.policy.loader import PolicySet
from remediator.settings import Settings
from remediator.signals.admission import Admission, Lane
from remediator.signals.sources.push import SignalInbox
from remediator.store import db
from remediator.store.heartbeats import HeartbeatBook
from remediator.store.models import LedgerGpu, LedgerMachine, LedgerPlacement
from remediator.store.repository import Repository
from remediator.web.agents import HeartbeatIn, take_heartbeat
from remediator.web.deps import WebDeps
from remediator.web.intake import fill_intake, limits_from

CLUSTER = "bench"
WARM_UP = "warm-up"
START = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
FIRST_WAVE_GAP = 0.001  # s between heartbeats: scale_10k's agents start at 1,000 a second
STEADY_GAP = 0.025  # the default heartbeat budget, 40 a second
MB = 1024 * 1024


@dataclass
class NoPolicies:
    """The console's policy view; the heartbeat path never reads it."""

    active: PolicySet | None = None
    last_error: PolicyError | None = None


@dataclass
class Built:
    deps: WebDeps
    book: HeartbeatBook
    sightings: HardwareSightings
    ledger: Ledger
    admission: Admission
    repository: Repository
    clock: FakeClock
    nodes: list[str]
    flushes: int


def intake(
    factory: sessionmaker[Session], cluster: str, clock: FakeClock, nodes: list[str]
) -> tuple[WebDeps, Ledger]:
    """The heartbeat path's state for one cluster, built as the controller builds it (app.py)."""
    settings = Settings(cluster_name=cluster)
    known = frozenset(nodes)
    deps = WebDeps(
        settings=settings,
        repository=Repository(factory, cluster, clock),
        policies=NoPolicies(),
        inbox=SignalInbox(capacity=10_000),
        registry=CollectorRegistry(),
        clock=clock,
        admission=Admission(limits_from(settings), monotonic=clock.monotonic),
        node_known=known.__contains__,
    )
    ledger = Ledger(factory, cluster, clock)
    deps.hardware = HardwareSightings(ledger, clock)
    fill_intake(deps)
    return deps, ledger


def prepare(root: Path, count: int) -> tuple[WebDeps, Ledger, FakeClock, list[str]]:
    """The migrated database and the intake, before the first heartbeat. One agent of another
    cluster goes through the whole path first: what a running controller has already built once
    (the ORM's mappers, compiled statements, pydantic's validators) is not the agents' state."""
    url = f"sqlite:///{root / 'remediator.db'}"
    db.upgrade(url)
    clock = FakeClock(START)
    factory = db.make_session_factory(db.make_engine(url))
    warm, _ = intake(factory, WARM_UP, clock, [WARM_UP])
    beat(warm, WARM_UP, START, whole=True)
    assert warm.heartbeats is not None and warm.hardware is not None
    warm.heartbeats.flush()
    if warm.hardware.flushes != 1:
        raise SystemExit("controller_memory: the warm-up agent's identity was not flushed")
    nodes = [f"gpu-node-{i:05d}" for i in range(count)]
    deps, ledger = intake(factory, CLUSTER, clock, nodes)
    return deps, ledger, clock, nodes


def beat(deps: WebDeps, node: str, started_at: datetime, *, whole: bool) -> bool:
    """One heartbeat as the lane takes it: JSON bytes parsed, answered; True: a flush is due."""
    body = json.dumps(heartbeat_body(node, started_at, whole=whole)).encode()
    status, answer, _headers, flush = take_heartbeat(deps, HeartbeatIn.model_validate_json(body))
    if status != 200 or answer["send_hardware"]:  # the digest was taken with the identity
        raise SystemExit(f"controller_memory: {node}: heartbeat answered {status} {answer}")
    return flush


def run(deps: WebDeps, ledger: Ledger, clock: FakeClock, nodes: list[str]) -> Built:
    book, sightings, admission = deps.heartbeats, deps.hardware, deps.admission
    assert book is not None and sightings is not None and admission is not None
    flushes = 0
    started_at = START
    for whole, gap in ((True, FIRST_WAVE_GAP), (False, STEADY_GAP)):
        for node in nodes:
            if beat(deps, node, started_at, whole=whole):
                book.flush()  # raises: a bench whose writes fail measures nothing
                flushes += 1
            clock.advance(gap)
    # What the last flushes left, flushed by the housekeeping tick as heartbeats go on.
    for node in nodes:
        if not sightings.pending() and not book.stats().pending:
            break
        if sightings.pending():  # the ledger's share goes with the book's flush of a heartbeat
            beat(deps, node, started_at, whole=False)
        clock.advance(book.flush_seconds)
        book.tick()
        flushes += 1
    return Built(deps, book, sightings, ledger, admission, deps.repository, clock, nodes, flushes)


def check(built: Built) -> list[str]:
    """What is wrong with the run's path (empty: it took the path it models)."""
    problems: list[str] = []
    n = len(built.nodes)
    admitted, refused, _top = built.admission.snapshot()
    if admitted[Lane.HEARTBEAT.value] < 2 * n or any(refused[Lane.HEARTBEAT.value].values()):
        problems.append(f"admission: {admitted} admitted, {refused} refused")
    rows = {s.node for s in built.repository.agent_statuses()}
    if rows != set(built.nodes):
        problems.append(f"heartbeat rows: {len(rows)} of {n} nodes written")
    stats = built.book.stats()
    if stats.pending:
        problems.append(f"heartbeat book: {stats.pending} rows never flushed")
    if built.sightings.taken != n or built.sightings.pending():
        problems.append(
            f"sightings: {built.sightings.taken} of {n} identities taken, "
            f"{built.sightings.pending()} never flushed"
        )
    warm_up = [g.uuid for g in bench_host(WARM_UP).gpus]
    with db.session_scope(built.repository.session_factory) as session:
        machines = session.scalar(
            select(func.count()).where(
                LedgerMachine.cluster == CLUSTER, LedgerMachine.id.like("dmi:%")
            )
        )
        gpus = session.scalar(select(func.count()).where(LedgerGpu.uuid.not_in(warm_up)))
        placed = session.scalar(
            select(func.count()).where(
                LedgerPlacement.cluster == CLUSTER, LedgerPlacement.to_at.is_(None)
            )
        )
    if (machines, gpus, placed) != (n, n * GPUS, n * GPUS):
        problems.append(
            f"ledger tables: {machines} machines, {gpus} GPUs, {placed} open placements "
            f"(expected {n}, {n * GPUS}, {n * GPUS})"
        )
    pictured = 0
    for node in built.nodes:
        host = bench_host(node)
        if built.ledger.machine_of(node) != host.machine:
            continue
        if all(
            built.ledger.gpu_at(node, g.pci_bus_id, g.index, built.clock.now()) == g.uuid
            for g in host.gpus
        ):
            pictured += 1
    if pictured != n:
        problems.append(f"ledger picture: {pictured} of {n} nodes with their machine and GPUs")
    return problems


# Not per-agent state: shared parts the structures point at.
_NOT_STATE = (type, ModuleType, FunctionType, BuiltinFunctionType, MethodType)


def reachable(roots: list[Any], seen: set[int]) -> int:
    """Bytes of every object reachable from `roots` not already in `seen` (which it extends)."""
    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _NOT_STATE):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        stack.extend(gc.get_referents(obj))
    return total


def attributes(obj: object) -> dict[str, Any]:
    found = dict(getattr(obj, "__dict__", {}))
    for klass in type(obj).__mro__:
        for name in getattr(klass, "__slots__", ()):
            if hasattr(obj, name):
                found[name] = getattr(obj, name)
    return found


def structures(built: Built) -> dict[str, int]:
    """Bytes reachable from each attribute of the book, the admission, the sightings and the
    ledger, each object counted once (in the first that reaches it)."""
    owners = {
        "book": built.book,
        "admission": built.admission,
        "sightings": built.sightings,
        "ledger": built.ledger,
    }
    shared = [*owners.values(), built.deps, built.repository, built.clock, built.nodes]
    shared += [built.repository.session_factory, built.ledger.session_factory]
    seen = {id(obj) for obj in shared}
    return {
        f"{owner}.{name}": reachable([value], seen)
        for owner, obj in owners.items()
        for name, value in attributes(obj).items()
    }


def rss_kb(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise SystemExit(f"controller_memory: no {field} in /proc/self/status")


def child(mode: str, count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="controller-memory-") as tmp:
        deps, ledger, clock, nodes = prepare(Path(tmp), count)
        gc.collect()
        if mode == "trace":
            tracemalloc.start()
        before = rss_kb()
        built = run(deps, ledger, clock, nodes)
        gc.collect()
        out: dict[str, Any] = {"flushes": built.flushes}
        if mode == "trace":
            current, peak = tracemalloc.get_traced_memory()
            out |= {"traced": current, "traced_peak": peak, "structures": structures(built)}
            tracemalloc.stop()
        else:
            after, hwm = rss_kb(), rss_kb("VmHWM")
            libc = ctypes.CDLL("libc.so.6")
            trimmed = libc.malloc_trim(0)
            out |= {
                "rss_before_kb": before,
                "rss_after_kb": after,
                "hwm_kb": hwm,
                "trim_returned": trimmed,
                "rss_trimmed_kb": rss_kb(),
            }
        problems = check(built)
        if problems:
            raise SystemExit(
                "controller_memory: the run did not take its path: " + "; ".join(problems)
            )
        return out


def spawn(mode: str, count: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.controller_memory", "--child", mode, "--nodes", str(count)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"controller_memory: the {mode} run failed ({done.returncode})")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench controller_memory")
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--child", choices=("trace", "rss"))
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.nodes)))
        return 0
    n = args.nodes
    traced = spawn("trace", n)
    rss = spawn("rss", n)
    print(
        f"{n} agents, {GPUS} GPUs each, {traced['flushes']} flushes; bytes reachable per structure"
    )
    print("| structure | MB | bytes per agent |")
    print("|---|---:|---:|")
    rows = sorted(traced["structures"].items(), key=lambda kv: -kv[1])
    for name, size in rows:
        if size >= 0.01 * MB:
            print(f"| {name} | {size / MB:.2f} | {size / n:.0f} |")
    print(
        f"| all structures | {sum(traced['structures'].values()) / MB:.2f} | "
        f"{sum(traced['structures'].values()) / n:.0f} |"
    )
    print(
        f"| tracemalloc traced (peak) | {traced['traced'] / MB:.2f} "
        f"({traced['traced_peak'] / MB:.2f}) | {traced['traced'] / n:.0f} |"
    )
    delta = (rss["rss_after_kb"] - rss["rss_before_kb"]) / 1024
    peak = (rss["hwm_kb"] - rss["rss_before_kb"]) / 1024
    trimmed = (rss["rss_after_kb"] - rss["rss_trimmed_kb"]) / 1024
    print(
        f"| RSS delta (high-water mark delta) | {delta:.1f} ({peak:.1f}) | {delta * MB / n:.0f} |"
    )
    print(f"| RSS malloc_trim(0) gave back (returned {rss['trim_returned']}) | {trimmed:.1f} | |")
    print(
        f"controller_memory: {n} agents {traced['traced'] / MB:.1f} MB traced, {delta:.1f} MB RSS"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Policy backtest at fleet scale: 30 days of archived signals for 2,000 nodes x 8 GPUs, replayed
under the shipped policies and under a proposed change (thermal 78 → 77 °C, max concurrent
5 → 2). Target (issue 15): under 60 s. Also measured: the archive's cost per intake cycle and
its storage per node-day.

Method. (1) Intake cost: the real SignalArchive records 2,000 x 8 GPU readings per cycle for 40
cycles (a 15 s poll) into a fresh SQLite file, timed per cycle (median), beside `evaluate` of the
same cycle under the shipped policies as the within-run reference. (2) Storage and replay: a
migrated SQLite file is filled directly (sqlite3 executemany) with what that archive writes for
30 days of the fleet model below; bytes per node-day = file size / (nodes x days). The real
history is the baseline replay's own remediations (each held 30 minutes), so the timed run also
checks the baseline against history. The backtest is timed end to end through the CLI's
`run_backtest` (read, two replays, comparison, JSON report).

Fleet model (seeded): 97.5% of GPUs stay under the 70 °C archive floor (one row per day each);
2.5% run warm, wandering 70-76 °C in 1 °C steps about every 15 minutes; 4 thermal excursions a
day (80-90 °C for 5-60 minutes, then back); 10 XIDs a day (79, 48, 13, 31, 94, 63), each held by
the DCGM gauge for 1-6 hours; 3 NVLink error bursts and 1 node condition a day; 4 pools of 500.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from remediator.backtest.cli import run_backtest
from remediator.backtest.recording import from_database
from remediator.backtest.replay import load_files, replay, run_filter
from remediator.policy.evaluate import History, evaluate
from remediator.policy.loader import load_policy_dir
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.archive import NodeSnapshot, SignalArchive

NODES = 2_000
GPUS = 8
DAYS = 30
POLL = timedelta(seconds=15)
T0 = datetime(2026, 1, 1, tzinfo=UTC)
POOLS = ("h100-a", "h100-b", "a100-a", "a100-b")
CLUSTER = "default"
REPO = Path(__file__).resolve().parent.parent
INTAKE_CYCLES = 40


def node_name(n: int) -> str:
    return f"gpu-node-{n:04d}"


def ts(at: datetime) -> str:
    """The UTCDateTime column's SQLite form."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


# -- (1) intake cost -------------------------------------------------------------------------


def intake_cost(workdir: Path) -> tuple[float, float, int]:
    """Median ms per cycle for the archive and for evaluate, and archived rows."""
    url = f"sqlite:///{workdir / 'intake.db'}"
    db.upgrade(url)
    engine = db.make_engine(url)
    archive = SignalArchive(db.make_session_factory(engine), CLUSTER, floors={"thermal": 70.0})
    policies = load_policy_dir(REPO / "policies")
    rng = random.Random(7)
    temps = [rng.choice((55.0, 60.0, 64.0, 72.0)) for _ in range(NODES * GPUS)]
    nodes = {
        node_name(n): NodeSnapshot(POOLS[n % 4], {"pool": POOLS[n % 4]}, True, False)
        for n in range(NODES)
    }
    history = History()
    archive_ms: list[float] = []
    evaluate_ms: list[float] = []
    for cycle in range(INTAKE_CYCLES):
        now = T0 + cycle * POLL
        for i in range(len(temps)):
            if rng.random() < 1 / 60:
                temps[i] += rng.choice((-1.0, 1.0))
        signals = [
            Signal(
                node=node_name(i // GPUS),
                kind=SignalKind.THERMAL,
                source="prometheus",
                observed_at=now,
                gpu=i % GPUS,
                value=temps[i],
                labels={"Hostname": node_name(i // GPUS), "gpu": str(i % GPUS)},
            )
            for i in range(len(temps))
        ]
        start = time.perf_counter()
        archive.record(signals, nodes, now)
        archive_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        evaluation = evaluate(signals, history, policies.policies, now, policies.settings)
        history = History(state=evaluation.state)
        evaluate_ms.append((time.perf_counter() - start) * 1000)
    archive.flush()
    with sqlite3.connect(workdir / "intake.db") as conn:
        rows = conn.execute("select count(*) from signal_archive").fetchone()[0]
    engine.dispose()
    return statistics.median(archive_ms), statistics.median(evaluate_ms), int(rows)


# -- (2) a month of the fleet, written as the archive writes it ------------------------------


def run_row(
    node: str,
    gpu: int | None,
    kind: str,
    code: int | None,
    value: float | None,
    source: str,
    first: datetime,
    last: datetime,
) -> tuple[object, ...]:
    readings = int((last - first) / POLL) + 1
    return (
        CLUSTER,
        node,
        gpu,
        kind,
        code,
        value,
        source,
        None,
        ts(first),
        ts(last) if readings > 1 else None,
        readings,
        0,
    )


def runs_of(
    node: str, gpu: int, levels: list[tuple[datetime, float]], end: datetime, floor: float
) -> Iterator[tuple[object, ...]]:
    """Rows for a GPU whose temperature changes to levels[i][1] at levels[i][0]: under the floor
    one row a day at most, above it one per level and at most one per hour (max_run)."""
    for index, (start, value) in enumerate(levels):
        stop = levels[index + 1][0] if index + 1 < len(levels) else end
        cut = timedelta(days=1) if value < floor else timedelta(hours=1)
        at = start
        while at < stop:
            last = min(at + cut, stop) - POLL
            yield run_row(node, gpu, "thermal", None, value, "prometheus", at, last)
            at = last + POLL


def generate(path: Path, seed: int = 15) -> dict[str, int]:
    rng = random.Random(seed)
    end = T0 + timedelta(days=DAYS)
    insert = "insert into signal_archive (cluster, node, gpu, kind, code, value, source, "
    insert += "label_set, first_at, last_at, readings, lag_ms) values (?,?,?,?,?,?,?,?,?,?,?,?)"
    counts = {"runs": 0}
    conn = sqlite3.connect(path)
    conn.execute("pragma journal_mode=wal")
    conn.execute("pragma synchronous=off")
    conn.execute("drop index ix_signal_archive_cluster_first")
    conn.execute("drop index ix_signal_archive_cluster_key")
    conn.execute("drop index ix_signal_archive_cluster_kind_value")

    def write(rows: list[tuple[object, ...]]) -> None:
        conn.executemany(insert, rows)
        counts["runs"] += len(rows)

    cycles = int((end - T0) / POLL)
    conn.executemany(
        "insert into signal_cycles (cluster, source, at) values (?,?,?)",
        ((CLUSTER, "prometheus", ts(T0 + i * POLL)) for i in range(cycles)),
    )
    excursions = {
        (rng.randrange(NODES), rng.randrange(GPUS)): [] for _ in range(4 * DAYS)
    }  # gpu → [(start, minutes, peak)]
    for key in excursions:
        start = T0 + timedelta(seconds=rng.randrange(DAYS * 86400 // 15) * 15)
        excursions[key].append((start, rng.randint(5, 60), float(rng.randint(80, 90))))
    batch: list[tuple[object, ...]] = []
    for n in range(NODES):
        node = node_name(n)
        for gpu in range(GPUS):
            warm = rng.random() < 0.025
            levels: list[tuple[datetime, float]] = []
            value = float(rng.randint(70, 76)) if warm else float(rng.randint(50, 66))
            levels.append((T0, value))
            if warm:
                at = T0
                while True:
                    at += timedelta(seconds=15 * rng.randint(1, 120))
                    if at >= end:
                        break
                    value = min(76.0, max(70.0, value + rng.choice((-1.0, 1.0))))
                    levels.append((at, value))
            for start, minutes, peak in excursions.get((n, gpu), ()):
                back = start + timedelta(minutes=minutes)
                before = [lv for lv in levels if lv[0] < start]
                after = [lv for lv in levels if lv[0] >= back]
                resume = before[-1][1] if before else levels[0][1]
                steps = [(start + timedelta(minutes=m), peak - 2 + (m % 3)) for m in range(minutes)]
                levels = [*before, *steps, (back, resume), *after]
            batch.extend(runs_of(node, gpu, levels, end, 70.0))
            if len(batch) > 50_000:
                write(batch)
                batch = []
    write(batch)

    events: list[tuple[object, ...]] = []
    for _ in range(10 * DAYS):
        node = node_name(rng.randrange(NODES))
        first = T0 + timedelta(seconds=rng.randrange(DAYS * 86400 // 15) * 15)
        last = min(first + timedelta(hours=rng.uniform(1, 6)), end - POLL)
        code = rng.choice((79, 48, 13, 31, 94, 63))
        events.append(
            run_row(node, rng.randrange(GPUS), "xid", code, None, "prometheus", first, last)
        )
    for _ in range(3 * DAYS):
        node = node_name(rng.randrange(NODES))
        first = T0 + timedelta(seconds=rng.randrange(DAYS * 86400 // 15) * 15)
        last = first + timedelta(minutes=rng.randint(1, 10))
        events.append(
            run_row(node, rng.randrange(GPUS), "nvlink", None, 4.0, "prometheus", first, last)
        )
    for _ in range(DAYS):
        node = node_name(rng.randrange(NODES))
        first = T0 + timedelta(seconds=rng.randrange(DAYS * 86400 // 15) * 15)
        last = first + timedelta(minutes=rng.randint(5, 120))
        events.append(run_row(node, None, "node_condition", 1, None, "nodes", first, last))
    write(events)
    conn.executemany(
        "insert into signal_cycles (cluster, source, at) values (?,?,?) on conflict do nothing",
        (
            (CLUSTER, "nodes", ts(datetime.fromisoformat(str(r[8])).replace(tzinfo=UTC) + i * POLL))
            for r in events
            if r[3] == "node_condition"
            for i in range(int(r[10]))  # type: ignore[call-overload]
        ),
    )
    conn.executemany(
        "insert into signal_archive_nodes (cluster, node, at, present, pool, labels, ready, "
        "cordoned) values (?,?,?,?,?,?,?,?)",
        (
            (
                CLUSTER,
                node_name(n),
                ts(T0),
                1,
                POOLS[n % 4],
                json.dumps({"pool": POOLS[n % 4]}),
                1,
                0,
            )
            for n in range(NODES)
        ),
    )
    conn.execute(
        "create index ix_signal_archive_cluster_first on signal_archive (cluster, first_at)"
    )
    conn.execute(
        "create index ix_signal_archive_cluster_key on signal_archive "
        "(cluster, node, gpu, kind, first_at)"
    )
    conn.execute(
        "create index ix_signal_archive_cluster_kind_value on signal_archive (cluster, kind, value)"
    )
    conn.commit()
    conn.close()
    return counts


def write_history(path: Path, url: str) -> int:
    """The baseline replay's remediations, as if they had happened (30 minutes each)."""
    engine = db.make_engine(url)
    policies = load_policy_dir(REPO / "policies")
    timeline = [(T0, policies)]
    recording = from_database(
        db.make_session_factory(engine),
        CLUSTER,
        T0,
        T0 + timedelta(days=DAYS),
        run_filter([timeline]),
    )
    engine.dispose()
    baseline = replay(recording, timeline)
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "insert into remediations (cluster, node, pool, policy, policy_priority, state, "
            "dry_run, approval_required, reason, signal_kind, signals, ladder, step_index, "
            "idempotency_key, attempts, version, created_at, updated_at, finished_at) "
            "values (?,?,?,?,0,'succeeded',?,0,?,'bench','[]',?,0,?,0,1,?,?,?)",
            (
                (
                    CLUSTER,
                    o.node,
                    o.pool,
                    o.policy,
                    o.dry_run,
                    o.reason,
                    json.dumps([{"action": a} for a in o.ladder]),
                    uuid.uuid4().hex,
                    ts(o.at),
                    ts(o.at),
                    ts(o.until or o.at),
                )
                for o in baseline.opened
            ),
        )
    return len(baseline.opened)


def proposed_dir(workdir: Path) -> Path:
    target = workdir / "proposed"
    shutil.copytree(REPO / "policies", target, ignore=shutil.ignore_patterns("tests"))
    thermal = target / "thermal.yaml"
    thermal.write_text(thermal.read_text().replace("above: 78", "above: 77"))
    settings = target / "settings.yaml"
    settings.write_text(settings.read_text().replace("max_concurrent: 5", "max_concurrent: 2"))
    load_files({p.name: p.read_text() for p in target.glob("*.yaml")})  # fails loudly if broken
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="keep the generated database here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-backtest-") as tmp:
        workdir = Path(tmp)
        archive_ms, evaluate_ms, intake_rows = intake_cost(workdir)
        path = workdir / "month.db"
        url = f"sqlite:///{path}"
        db.upgrade(url)
        start = time.perf_counter()
        counts = generate(path)
        generated_s = time.perf_counter() - start
        history = write_history(path, url)
        size = path.stat().st_size
        proposed = proposed_dir(workdir)
        namespace = argparse.Namespace(
            proposed=proposed,
            baseline=REPO / "policies",
            baseline_ref=None,
            signals=None,
            database=url,
            since=T0.isoformat(),
            until=(T0 + timedelta(days=DAYS)).isoformat(),
            cluster=CLUSTER,
            tolerance="1m",
        )
        start = time.perf_counter()
        ((_, report),) = run_backtest(namespace)
        backtest_s = time.perf_counter() - start
        if args.keep is not None:
            shutil.copyfile(path, args.keep)

    node_days = NODES * DAYS
    print(f"fleet: {NODES} nodes x {GPUS} GPUs, {DAYS} days, 15 s polls")
    print(f"(generated in {generated_s:.0f} s)")
    print()
    print("| measure | value |")
    print("| --- | ---: |")
    print(f"| archive per intake cycle (16,000 readings), ms | {archive_ms:.1f} |")
    print(f"| evaluate per intake cycle, same readings, ms | {evaluate_ms:.1f} |")
    print(f"| archive ÷ evaluate | {archive_ms / evaluate_ms:.2f} |")
    print(f"| rows after {INTAKE_CYCLES} intake cycles | {intake_rows} |")
    print(f"| archived runs, 30 days | {counts['runs']:,} |")
    print(f"| SQLite file, MB | {size / 1e6:.0f} |")
    print(f"| storage per node-day, KB | {size / node_days / 1e3:.2f} |")
    print(f"| real remediations (history) | {history} |")
    base, new = len(report.baseline.opened), len(report.proposed.opened)
    print(f"| baseline / proposed remediations | {base} / {new} |")
    diffs = f"{len(report.added)} / {len(report.removed)} / {len(report.changed)}"
    print(f"| added / removed / changed | {diffs} |")
    print(f"| holds added / removed | {len(report.holds_added)} / {len(report.holds_removed)} |")
    print(f"| mismatches with history | {len(report.mismatches)} |")
    print(f"| readings replayed (baseline) | {report.baseline.readings:,} |")
    print(f"| backtest, s | {backtest_s:.1f} |")
    print()
    print(
        f"backtest of {DAYS} days x {NODES} nodes: {backtest_s:.1f} s (target < 60 s), "
        f"{size / node_days / 1e3:.2f} KB per node-day, archive {archive_ms:.0f} ms per cycle"
    )


if __name__ == "__main__":
    main()

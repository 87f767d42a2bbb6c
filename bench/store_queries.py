"""The console's queries at a million remediations. Target: each under 150 ms median.

Method: a throwaway PostgreSQL (or --database-url, an empty database) is migrated, then seeded
server-side with generate_series: 1,000,000 remediations over ~350 days (20,000 nodes, 10 pools,
6 policies, 8 signal kinds, the newest 2,000 open) and 3 events each, then ANALYZEd. Each query runs
through the Repository (record conversion included) 2 times to warm up, then 15 times; the table
shows the wall-clock median and p90, and the median as a ratio to the plain first page.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from remediator.clock import FakeClock
from remediator.model.states import State
from remediator.store import db
from remediator.store.records import RemediationFilter
from remediator.store.repository import Repository

CLUSTER = "bench"
ROWS = int(os.environ.get("BENCH_STORE_ROWS", "1000000"))
OPEN_ROWS = 2_000
NODES = 20_000
WARMUP, RUNS = 2, 15
TARGET_MS = 150.0
START = datetime(2026, 1, 1, tzinfo=UTC)
STEP_SECONDS = 30

SEED_REMEDIATIONS = """
INSERT INTO remediations (cluster, node, pool, policy, policy_priority, policy_commit, policy_hash,
    state, dry_run, approval_required, reason, signal_kind, xid_code, signals, ladder, step_index,
    idempotency_key, attempts, version, created_at, updated_at, finished_at)
SELECT :cluster, 'gpu-node-' || lpad((i % :nodes)::text, 5, '0'), 'pool-' || (i % 10),
    (ARRAY['xid-fatal', 'thermal', 'nvlink', 'infiniband', 'ecc', 'row-remap'])[1 + i % 6], i % 6,
    'c0ffee', 'h' || (i % 40),
    CASE WHEN i > :rows - :open_rows THEN (ARRAY['detected', 'awaiting_approval', 'quarantined',
            'held_by_opt_out', 'checkpointing', 'draining', 'replacing', 'verifying', 'held'])
            [1 + i % 9]
         WHEN i % 20 = 0 THEN 'failed' WHEN i % 20 = 1 THEN 'cancelled' ELSE 'succeeded' END,
    i % 50 = 0, false, 'seeded',
    (ARRAY['xid', 'thermal', 'nvlink', 'infiniband', 'ecc', 'row_remap', 'gpu_missing',
        'node_condition'])[1 + i % 8],
    CASE WHEN i % 8 = 0 THEN (ARRAY[79, 48, 74, 94, 63, 13, 31, 95])[1 + (i / 8) % 8] END,
    '[]'::jsonb, '[{"action": "cordon"}, {"action": "drain", "grace_seconds": 120}]'::jsonb, 0,
    md5(i::text), 0, 1, t.at, t.at,
    CASE WHEN i <= :rows - :open_rows THEN t.at + interval '6 min' END
FROM generate_series(1, :rows) AS i,
    LATERAL (SELECT :start + i * make_interval(secs => :step) AS at) AS t
"""

SEED_EVENTS = """
INSERT INTO remediation_events (remediation_id, cluster, at, from_state, to_state, action, detail,
    actor)
SELECT r.id, r.cluster, r.created_at + k * interval '2 min',
    (ARRAY[NULL, 'detected', 'quarantined'])[1 + k],
    (ARRAY['detected', 'quarantined', r.state])[1 + k],
    (ARRAY['detected', 'cordon', 'finish'])[1 + k], '{}'::jsonb, 'controller-0'
FROM remediations r, generate_series(0, 2) AS k
"""


def seed(engine: Engine) -> float:
    began = time.perf_counter()
    params: dict[str, Any] = {
        "cluster": CLUSTER,
        "nodes": NODES,
        "rows": ROWS,
        "open_rows": OPEN_ROWS,
        "start": START,
        "step": STEP_SECONDS,
    }
    with engine.begin() as conn:
        conn.execute(text(SEED_REMEDIATIONS), params)
        conn.execute(text(SEED_EVENTS))
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
    return time.perf_counter() - began


def timed(run: Callable[[], object]) -> tuple[float, float]:
    for _ in range(WARMUP):
        run()
    samples = []
    for _ in range(RUNS):
        began = time.perf_counter()
        run()
        samples.append((time.perf_counter() - began) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.9) - 1]


def cases(repo: Repository) -> list[tuple[str, Callable[[], object]]]:
    middle = repo.list(RemediationFilter(), None, 50)
    deep_cursor = middle.next_cursor
    for _ in range(200):  # 10,000 rows deep
        deep_cursor = repo.list(RemediationFilter(), deep_cursor, 50).next_cursor
    some_id = middle.rows[10].id
    end = START + timedelta(seconds=ROWS * STEP_SECONDS)
    week = RemediationFilter(
        created_from=end - timedelta(days=200), created_to=end - timedelta(days=193)
    )

    def page(**filters: Any) -> Callable[[], object]:
        return lambda: repo.list(RemediationFilter(**filters), None, 50)

    return [
        ("first page, newest first", page()),
        ("page 201 (keyset cursor)", lambda: repo.list(RemediationFilter(), deep_cursor, 50)),
        ("in flight first", page(in_flight_first=True)),
        ("node exact", page(node="gpu-node-01234")),
        ("node substring 'node-0123'", page(node_search="node-0123")),
        ("node substring, no match", page(node_search="zzz")),
        ("state held", page(states=frozenset({State.HELD}))),
        ("state failed", page(states=frozenset({State.FAILED}))),
        ("signal kind thermal", page(signal_kind="thermal")),
        ("xid 79", page(xid_code=79)),
        ("policy nvlink", page(policy="nvlink")),
        ("pool-0 + dry run", page(pool="pool-0", dry_run=True)),
        ("pool-3 + dry run, no match", page(pool="pool-3", dry_run=True)),
        ("one week, 200 days ago", lambda: repo.list(week, None, 50)),
        ("detail with events", lambda: repo.get(some_id)),
        ("list_open (2,000 rows)", repo.list_open),
        ("node history", lambda: repo.node_history("gpu-node-01234")),
        ("counts by state, all rows", repo.counts_by_state),
        ("overview (7-day window)", repo.overview),
        ("open by pool", repo.open_by_pool),
        ("failed in last 24 h", lambda: repo.failed_since(end - timedelta(hours=24))),
        ("per-day counts, 30 days", lambda: repo.daily_counts_by_kind(30)),
    ]


@contextmanager
def seeded_database(database_url: str | None) -> Iterator[tuple[Engine, float, datetime]]:
    """The migrated, seeded database (a throwaway PostgreSQL unless a URL is given), how long the
    seeding took, and the clock's "now" just after the last seeded row; torn down afterwards."""
    server = None
    url = database_url
    if url is None:
        from tests.fixtures.postgres import start_postgres

        server = start_postgres()
        url = server.url(server.create_database())
    engine = db.make_engine(url)
    try:
        db.upgrade(engine)
        seconds = seed(engine)
        yield engine, seconds, START + timedelta(seconds=ROWS * STEP_SECONDS)
    finally:
        engine.dispose()
        if server is not None:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", help="an empty PostgreSQL database (default: throwaway)")
    args = parser.parse_args()
    with seeded_database(args.database_url) as (engine, seconds, end):
        repo = Repository(db.make_session_factory(engine), CLUSTER, FakeClock(end))
        results = [(name, *timed(run)) for name, run in cases(repo)]
    print(f"{ROWS:,} remediations, {3 * ROWS:,} events; seeded in {seconds:.0f} s")
    baseline = results[0][1]
    print(f"{'query':<30}{'median ms':>11}{'p90 ms':>9}{'x page 1':>10}  target {TARGET_MS:.0f} ms")
    for name, median, p90 in results:
        verdict = "ok" if median < TARGET_MS else "SLOW"
        print(f"{name:<30}{median:>11.1f}{p90:>9.1f}{median / baseline:>10.1f}  {verdict}")


if __name__ == "__main__":
    main()

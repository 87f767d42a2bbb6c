"""The fleet console over one PostgreSQL holding 50 clusters x 2,000 nodes and 5 million
remediations with their timelines over a year. Targets (issue 25): the fleet overview median
under 300 ms, any filtered list and the fleet "waiting for you" under 150 ms, a remediation
detail under 50 ms, the fleet figures page under 500 ms; and one cluster's controller write path
no slower beside 49 other clusters' rows (ratio to a single-cluster database ≤ 1.2).

Method: a PostgreSQL of its own (fsync off), migrated, seeded server-side with generate_series
(never ORM inserts; the secondary indexes dropped for the load and built after it):
BENCH_FLEET_ROWS remediations (default 5,000,000) spread over 365 days and 50 clusters (2,000
nodes, 4 pools and 3 GPU models each, the newest 40 per cluster open, one in 25 awaiting approval
or held), 3 events each (detected, quarantined with its GPU count, the end), then VACUUM ANALYZE.
The seeded data directory is kept in BENCH_FLEET_CACHE (default /var/tmp/remediator-bench-fleet)
under a key of the row count and the seed's own version, so a second run starts from it and
migrates it to the current schema head (each run's write-path nodes have names of their own); a
cache of another key is deleted. BENCH_FLEET_KEEP=0 deletes the database when done;
BENCH_FLEET_SEED_ONLY=1 seeds (or migrates) the cache and stops before timing. Before timing,
the bench checks the databases are the ones it models (50 clusters, the seeded row count, c07
alone in the single-cluster one).
Requests go through the fleet app (`create_fleet_app`, the app `remediator console` serves) in
process with one operator token: routing, auth, the queries, record conversion and JSON or Jinja
included, the socket not. 2 warm-ups, then 15 timed (for the figures the first warm-up builds
the window's daily rollups when the seed has none: minutes); wall-clock median and p90. Then
once, no target: the 30-day figures as the first read of a console just started (the rollups
built, the open remediations' spans not yet kept). The write path: 200 remediations created and
moved through 3 transitions each by one cluster's Repository, in the fleet database and in a
second database seeded with that cluster's rows only; the ratio of the medians per remediation.
The last line is the headline.
"""

from __future__ import annotations

import itertools
import os
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Connection, Engine, text

from remediator.clock import FakeClock
from remediator.model.states import State
from remediator.settings import Settings, WebSettings
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.records import NewRemediation
from remediator.store.repository import Repository
from remediator.web.fleet import Fleet, create_fleet_app

ROWS = int(os.environ.get("BENCH_FLEET_ROWS", "5000000"))
CACHE = Path(os.environ.get("BENCH_FLEET_CACHE", "/var/tmp/remediator-bench-fleet"))
KEEP = os.environ.get("BENCH_FLEET_KEEP", "1") != "0"
SEED_ONLY = os.environ.get("BENCH_FLEET_SEED_ONLY", "0") == "1"
# Bumped when SEED_* below change: the cache key, so a cached seed is never taken for another.
SEED_VERSION = 1
SEEDED = "seeded"  # written once the seed is complete, with its duration in seconds
RUN_TAG = f"{os.getpid()}-{int(time.time())}"
CLUSTERS = 50
NODES = 2_000
OPEN_PER_CLUSTER = 40
WARMUP, RUNS = 2, 15
WRITES = 200
TOKEN = "fleet-bench-token-0123456789"
START = datetime(2025, 12, 1, tzinfo=UTC)
YEAR_SECONDS = 365 * 24 * 3600

SEED_CLUSTERS = """
INSERT INTO clusters (name, kube_system_uid, registered_at, registered_by)
SELECT 'c' || lpad(c::text, 2, '0'), md5(c::text), :start, 'bench'
FROM generate_series(0, :clusters - 1) AS c
WHERE c < :clusters AND (:only < 0 OR c = :only)
"""

SEED_REMEDIATIONS = """
INSERT INTO remediations (cluster, node, pool, policy, policy_priority, state, dry_run,
    approval_required, reason, signal_kind, xid_code, signals, ladder, step_index,
    idempotency_key, attempts, version, created_at, updated_at, finished_at, outcome)
SELECT 'c' || lpad((i % :clusters)::text, 2, '0'),
    'gpu-' || lpad(((i / :clusters) % :nodes)::text, 4, '0'),
    'pool-' || ((i / :clusters) % 4),
    (ARRAY['xid-fatal', 'thermal', 'nvlink', 'ecc'])[1 + i % 4], 0,
    CASE WHEN i >= :rows - :open_rows THEN
            (ARRAY['awaiting_approval', 'held', 'draining', 'replacing', 'quarantined'])[1 + i % 5]
         WHEN i % 20 = 0 THEN 'failed' WHEN i % 20 = 1 THEN 'cancelled' ELSE 'succeeded' END,
    false, false, 'seeded', 'xid', 79,
    jsonb_build_array(jsonb_build_object('node',
        'gpu-' || lpad(((i / :clusters) % :nodes)::text, 4, '0'), 'kind', 'xid', 'code', 79,
        'gpu', 0, 'source', 'dcgm', 'observed_at', to_jsonb(t.at), 'labels',
        jsonb_build_object('modelName',
        (ARRAY['NVIDIA H100 80GB HBM3', 'NVIDIA A100 SXM4 80GB', 'NVIDIA B200'])[1 + i % 3]))),
    '[{"action": "cordon"}, {"action": "replace"}]'::jsonb, 0,
    md5('r' || i::text), 0, 1, t.at, t.at + interval '40 min',
    CASE WHEN i < :rows - :open_rows THEN t.at + interval '40 min' END,
    CASE WHEN i < :rows - :open_rows AND i % 20 > 1 THEN
        (ARRAY['repaired', 'replaced'])[1 + i % 2] END
FROM generate_series(0, :rows - 1) AS i,
    LATERAL (SELECT :start + make_interval(secs => (i::float8 * :span / :rows)) AS at) AS t
WHERE :only < 0 OR i % :clusters = :only
"""

SEED_EVENTS = """
INSERT INTO remediation_events (remediation_id, cluster, at, from_state, to_state, action, detail,
    actor)
SELECT r.id, r.cluster, r.created_at + k * interval '20 min',
    (ARRAY[NULL, 'detected', 'quarantined'])[1 + k],
    (ARRAY['detected', 'quarantined', r.state])[1 + k],
    (ARRAY['detected', 'cordon', 'finish'])[1 + k],
    CASE WHEN k = 2 THEN '{"gpus": 8}'::jsonb ELSE '{}'::jsonb END, 'controller'
FROM remediations r, generate_series(0, 2) AS k
"""


LOADED_TABLES = ("remediations", "remediation_events")


def _secondary_indexes(conn: Connection) -> list[tuple[str, str]]:
    """(name, CREATE statement) of the loaded tables' indexes that back no constraint."""
    rows = conn.execute(
        text(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i WHERE i.tablename = ANY(:tables) "
            "AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)"
        ),
        {"tables": list(LOADED_TABLES)},
    )
    return [(name, definition) for name, definition in rows]


def seed(engine: Engine, only: int = -1) -> float:
    """`only`: seed one cluster's share (the single-cluster database), else all 50. The
    secondary indexes are dropped for the load and built after it (one sort each, not millions
    of index inserts); the append-only triggers are left in place (they fire on UPDATE and
    DELETE, not on INSERT)."""
    began = time.perf_counter()
    params: dict[str, Any] = {
        "clusters": CLUSTERS,
        "nodes": NODES,
        "rows": ROWS,
        "open_rows": OPEN_PER_CLUSTER * CLUSTERS,
        "start": START,
        "span": YEAR_SECONDS,
        "only": only,
    }
    with engine.begin() as conn:
        indexes = _secondary_indexes(conn)
        for name, _ in indexes:
            conn.execute(text(f'DROP INDEX "{name}"'))
        conn.execute(text("SET LOCAL maintenance_work_mem = '256MB'"))
        conn.execute(text(SEED_CLUSTERS), params)
        conn.execute(text(SEED_REMEDIATIONS), params)
        conn.execute(text(SEED_EVENTS))
        for _, definition in indexes:
            conn.execute(text(definition))
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
    return statistics.median(samples), samples[max(0, int(len(samples) * 0.9) - 1)]


def write_path(engine: Engine, cluster: str, now: datetime) -> float:
    """Median ms per remediation: create, then detected → quarantined → draining → succeeded."""
    clock = FakeClock(now)
    repo = Repository(db.make_session_factory(engine), cluster, clock)
    samples = []
    for n in range(WRITES):
        node = f"bench-write-{RUN_TAG}-{n:04d}"
        signal = Signal(node=node, kind=SignalKind.XID, source="dcgm", observed_at=now, code=79)
        new = NewRemediation(
            node=node,
            policy="xid-fatal",
            reason="bench",
            signals=[signal],
            ladder=[{"action": "cordon"}, {"action": "drain"}],
            pool="pool-0",
        )
        began = time.perf_counter()
        record = repo.create(new, actor="controller")
        steps = (State.DETECTED, State.QUARANTINED, State.DRAINING, State.SUCCEEDED)
        for before, after in itertools.pairwise(steps):
            record = repo.transition(record.id, before, after, action="step", actor="controller")
        samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


@dataclass
class Server:
    root: Path
    port: int
    run_as: list[str]
    pg_ctl: str

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        subprocess.run(
            [*self.run_as, self.pg_ctl, "-D", str(self.root / "data"), "-m", "fast", "stop"],
            check=False,
            capture_output=True,
        )


def open_server() -> tuple[Server, bool]:
    """The bench's own PostgreSQL over the cached data directory of this row count and seed
    (True: freshly made, to be seeded); other keys' directories are deleted."""
    from tests.fixtures.postgres import INITDB, START, _free_port, _pg_bin

    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        raise SystemExit("fleet_console: PostgreSQL server binaries (initdb, pg_ctl) not found")
    key = f"seed{SEED_VERSION}-{ROWS}"
    CACHE.mkdir(parents=True, exist_ok=True)
    for other in CACHE.iterdir():
        if other.name != key:
            shutil.rmtree(other, ignore_errors=True)
    root = CACHE / key
    fresh = not (root / SEEDED).exists()
    run_as: list[str] = []
    if fresh:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        if os.geteuid() == 0:
            shutil.chown(CACHE, "postgres", "postgres")
            shutil.chown(root, "postgres", "postgres")
    if os.geteuid() == 0:
        run_as = ["runuser", "-u", "postgres", "--"]
    if fresh:
        subprocess.run(
            [
                *run_as,
                initdb,
                "-D",
                str(root / "data"),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                *INITDB,
            ],
            check=True,
            capture_output=True,
        )
    port = _free_port()
    options = (
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off "
        "-c synchronous_commit=off -c full_page_writes=off -c max_wal_size=4GB "
        "-c shared_buffers=512MB"
    )
    subprocess.run(
        [*run_as, pg_ctl, "-D", str(root / "data"), "-o", options, "-l", str(root / "log"), *START],
        check=True,
        capture_output=True,
    )
    return Server(root, port, run_as, pg_ctl), fresh


def check_modelled(fleet_engine: Engine, single_engine: Engine) -> None:
    """The databases are the ones the bench models, else its figures mean nothing."""
    with fleet_engine.connect() as conn:
        clusters = conn.execute(text("SELECT count(*) FROM clusters")).scalar_one()
        rows = conn.execute(
            text("SELECT count(*) FROM remediations WHERE node NOT LIKE 'bench-write-%'")
        ).scalar_one()
    with single_engine.connect() as conn:
        alone = conn.execute(
            text("SELECT array_agg(DISTINCT cluster) FROM remediations")
        ).scalar_one()
    assert clusters == CLUSTERS, f"{clusters} clusters seeded, not {CLUSTERS}"
    assert rows == ROWS, f"{rows:,} remediations seeded, not {ROWS:,}"
    assert alone == ["c07"], f"the single-cluster database holds {alone}"


def main() -> None:
    server, fresh = open_server()
    try:
        fleet_url, single_url = server.url("fleet"), server.url("single")
        seeded = 0.0
        if fresh:
            admin = db.make_engine(server.url("postgres"))
            with admin.connect() as conn:
                conn = conn.execution_options(isolation_level="AUTOCOMMIT")
                conn.execute(text("CREATE DATABASE fleet"))
                conn.execute(text("CREATE DATABASE single"))
            admin.dispose()
        fleet_engine, single_engine = db.make_engine(fleet_url), db.make_engine(single_url)
        # A cached seed made at an older head is migrated like a user's database would be.
        db.upgrade(fleet_engine)
        db.upgrade(single_engine)
        if fresh:
            seeded = seed(fleet_engine)
            seed(single_engine, only=7)
            (server.root / SEEDED).write_text(f"{seeded:.0f}\n")
        else:
            seeded = float((server.root / SEEDED).read_text())
        check_modelled(fleet_engine, single_engine)
        if SEED_ONLY:
            print(f"fleet_console: seed ready in {server.root} ({seeded:.0f} s)")
            return
        now = START + timedelta(seconds=YEAR_SECONDS)
        settings = Settings(
            database_url=fleet_url, web=WebSettings(operator_tokens=[SecretStr(TOKEN)])
        )
        fleet = Fleet(settings, fleet_engine, FakeClock(now))
        client = TestClient(create_fleet_app(fleet))
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with fleet_engine.connect() as conn:
            some_id = conn.execute(
                text(
                    "SELECT id FROM remediations WHERE cluster = 'c07' ORDER BY id "
                    "OFFSET (SELECT count(*) / 2 FROM remediations WHERE cluster = 'c07') LIMIT 1"
                )
            ).scalar_one()

        def get(path: str) -> Callable[[], object]:
            def run() -> object:
                answer = client.get(path, headers=auth)
                assert answer.status_code == 200, (path, answer.status_code, answer.text[:300])
                return answer

            return run

        cases: list[tuple[str, str, float]] = [
            ("fleet overview, API", "/api/v1/clusters", 300),
            ("fleet overview, page", "/fleet", 300),
            ("fleet waiting for you", "/api/v1/fleet/waiting", 150),
            ("list c07, newest first", "/api/v1/remediations?cluster=c07", 150),
            ("list c07, state failed", "/api/v1/remediations?cluster=c07&state=failed", 150),
            ("list c07, pool-3 page", "/remediations?cluster=c07&pool=pool-3", 150),
            (
                "list c07, in flight first",
                "/api/v1/remediations?cluster=c07&in_flight_first=true",
                150,
            ),
            ("detail (cluster from id)", f"/api/v1/remediations/{some_id}", 50),
            ("fleet figures, 7 days, page", "/fleet/figures?days=7", 500),
            ("fleet figures, 30 days, JSON", "/api/v1/fleet/figures?days=30", 500),
        ]
        results = [(name, *timed(get(path)), target) for name, path, target in cases]
        restarted = TestClient(create_fleet_app(Fleet(settings, fleet_engine, FakeClock(now))))
        began = time.perf_counter()
        answer = restarted.get("/api/v1/fleet/figures?days=30", headers=auth)
        assert answer.status_code == 200, answer.text[:300]
        first_read = (time.perf_counter() - began) * 1000
        in_fleet = write_path(fleet_engine, "c07", now)
        alone = write_path(single_engine, "c07", now)
        fleet_engine.dispose()
        single_engine.dispose()
    finally:
        server.stop()
        if not KEEP:
            shutil.rmtree(server.root, ignore_errors=True)
    print(
        f"{ROWS:,} remediations, {3 * ROWS:,} events, {CLUSTERS} clusters x {NODES:,} nodes; "
        f"seeded in {seeded:.0f} s{'' if fresh else ' (an earlier run; cached)'}; "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(f"{'request':<34}{'median ms':>11}{'p90 ms':>9}{'target':>8}")
    met = 0
    for name, median, p90, target in results:
        verdict = "ok" if median < target else "SLOW"
        met += verdict == "ok"
        print(f"{name:<34}{median:>11.1f}{p90:>9.1f}{target:>8.0f}  {verdict}")
    print(f"{'fleet figures, 30 days, new console':<34}{first_read:>11.1f}  (its first read)")
    ratio = in_fleet / alone
    print(
        f"write path per remediation: {in_fleet:.1f} ms beside 49 clusters, {alone:.1f} ms alone"
        f" (ratio {ratio:.2f}, target ≤ 1.2: {'ok' if ratio <= 1.2 else 'SLOW'})"
    )
    print(f"fleet console: {met}/{len(results)} request targets met; write-path ratio {ratio:.2f}")


if __name__ == "__main__":
    main()

"""The fleet console over one PostgreSQL holding 50 clusters x 2,000 nodes and 5 million
remediations with their timelines over a year. Targets (issue 25): the fleet overview median
under 300 ms, any filtered list and the fleet "waiting for you" under 150 ms, a remediation
detail under 50 ms, the fleet figures page under 500 ms; and one cluster's controller write path
no slower beside 49 other clusters' rows (ratio to a single-cluster database ≤ 1.2).

Method: a throwaway PostgreSQL (fsync off), migrated, seeded server-side with generate_series
(never ORM inserts): BENCH_FLEET_ROWS remediations (default 5,000,000) spread over 365 days and
50 clusters (2,000 nodes, 4 pools and 3 GPU models each, the newest 40 per cluster open, one in
25 awaiting approval or held), 3 events each (detected, quarantined with its GPU count, the end),
then VACUUM ANALYZE. Requests go through the fleet app (`create_fleet_app`, the app `remediator
console` serves) in process with one operator token: routing, auth, the queries, record
conversion and JSON or Jinja included, the socket not. 2 warm-ups, then 15 timed; wall-clock
median and p90. The write path: 200 remediations created and moved through 3 transitions each
by one cluster's Repository, in the fleet database and in a second database seeded with that
cluster's rows only; the ratio of the medians per remediation. The last line is the headline.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine, text

from remediator.clock import FakeClock
from remediator.model.states import State
from remediator.settings import Settings, WebSettings
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.records import NewRemediation
from remediator.store.repository import Repository
from remediator.web.fleet import Fleet, create_fleet_app

ROWS = int(os.environ.get("BENCH_FLEET_ROWS", "5000000"))
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


def seed(engine: Engine, only: int = -1) -> float:
    """`only`: seed one cluster's share (the single-cluster database), else all 50."""
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
        conn.execute(text(SEED_CLUSTERS), params)
        conn.execute(text(SEED_REMEDIATIONS), params)
        conn.execute(text(SEED_EVENTS))
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))
    return time.perf_counter() - began


def timed(run: Callable[[], object], runs: int = RUNS) -> tuple[float, float]:
    for _ in range(WARMUP):
        run()
    samples = []
    for _ in range(runs):
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
        node = f"bench-write-{n:04d}"
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


def main() -> None:
    from tests.fixtures.postgres import start_postgres

    server = start_postgres()
    try:
        fleet_url = server.url(server.create_database())
        single_url = server.url(server.create_database())
        fleet_engine, single_engine = db.make_engine(fleet_url), db.make_engine(single_url)
        db.upgrade(fleet_engine)
        db.upgrade(single_engine)
        seeded = seed(fleet_engine)
        seed(single_engine, only=7)
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
        in_fleet = write_path(fleet_engine, "c07", now)
        alone = write_path(single_engine, "c07", now)
        fleet_engine.dispose()
        single_engine.dispose()
    finally:
        server.stop()
    print(
        f"{ROWS:,} remediations, {3 * ROWS:,} events, {CLUSTERS} clusters x {NODES:,} nodes; "
        f"seeded in {seeded:.0f} s"
    )
    print(f"{'request':<34}{'median ms':>11}{'p90 ms':>9}{'target':>8}")
    met = 0
    for name, median, p90, target in results:
        verdict = "ok" if median < target else "SLOW"
        met += verdict == "ok"
        print(f"{name:<34}{median:>11.1f}{p90:>9.1f}{target:>8.0f}  {verdict}")
    ratio = in_fleet / alone
    print(
        f"write path per remediation: {in_fleet:.1f} ms beside 49 clusters, {alone:.1f} ms alone"
        f" (ratio {ratio:.2f}, target ≤ 1.2: {'ok' if ratio <= 1.2 else 'SLOW'})"
    )
    print(f"fleet console: {met}/{len(results)} request targets met; write-path ratio {ratio:.2f}")


if __name__ == "__main__":
    main()

"""A GPU's page and API with the hardware ledger full. Target: each under 100 ms median.

Method: a throwaway PostgreSQL is migrated and seeded server-side with generate_series: 10 years
of a 10,000-node fleet (8 GPUs each, every tenth GPU swapped once halfway, so 88,000 GPUs and
88,000 placements) at the store bench's fault rate (bench/store_queries.py: 1,000,000 remediations
over ~347 days at 20,000 nodes, ~52 per node-year): 5.2 million faults, each a signal link and a
remediation link (10.4 million link rows), then ANALYZEd. The seeded database is cached under
/var/tmp as a pg_dump (restored in a fraction of the seeding time); BENCH_LEDGER_NODES scales the
fleet for a quick look. The page (/gpus/{uuid}, rendered by the console) and the API
(/api/v1/gpus/{uuid}) of the GPU with the most links are fetched through the app (TestClient, a
read-only token) 2 times to warm up, then 15 times; median and p90 wall-clock.

The bench checks the plan first: EXPLAIN of the page's link and placement queries must use their
indexes (no Seq Scan on ledger_links or ledger_placements), else it stops with the plan.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import Engine, text

from remediator.store import db

NODES = int(os.environ.get("BENCH_LEDGER_NODES", "10000"))
GPUS_PER_NODE = 8
YEARS = 10
FAULTS_PER_NODE_YEAR = 52
FAULTS = NODES * YEARS * FAULTS_PER_NODE_YEAR
START = datetime(2016, 12, 1, tzinfo=UTC)
END = START + timedelta(days=365.25 * YEARS)
WARMUP, RUNS = 2, 15
TARGET_MS = 100.0
CACHE = Path("/var/tmp") / f"remediator-bench-ledger-{NODES}n-{YEARS}y-{FAULTS}f.dump"

SEED = [
    """
INSERT INTO ledger_machines (id, provider_id, dmi_serial, cluster, node, first_seen_at,
    last_seen_at)
SELECT 'i-' || lpad(n::text, 6, '0'), 'aws:///us-east-1a/i-' || lpad(n::text, 6, '0'), NULL,
    'bench', 'gpu-node-' || lpad(n::text, 5, '0'), :start, :end
FROM generate_series(0, :nodes - 1) AS n
""",
    """
INSERT INTO ledger_gpus (uuid, serial, model, vbios, driver, first_seen_at, last_seen_at)
SELECT 'GPU-' || lpad(g::text, 8, '0') || '-0000-4000-8000-' || lpad(g::text, 12, '0'),
    (1652823000000 + g)::text, (ARRAY['NVIDIA H100 80GB HBM3', 'NVIDIA A100-SXM4-80GB'])[1 + g % 2],
    (ARRAY['96.00.89.00.01', '96.00.74.00.11'])[1 + g % 2],
    (ARRAY['550.54.15', '535.161.08', '560.35.03'])[1 + g % 3], :start, :end
FROM generate_series(0, :gpus * 11 / 10 - 1) AS g
""",
    # GPU g < :gpus sits in node g / 8 from the start; every tenth is swapped halfway for a spare
    # (g >= :gpus), which takes its slot.
    """
INSERT INTO ledger_placements (gpu_uuid, machine_id, cluster, node, pci_bus_id, gpu_index,
    from_at, to_at)
SELECT 'GPU-' || lpad(g::text, 8, '0') || '-0000-4000-8000-' || lpad(g::text, 12, '0'),
    'i-' || lpad((g / 8)::text, 6, '0'), 'bench', 'gpu-node-' || lpad((g / 8)::text, 5, '0'),
    '00000000:' || lpad(to_hex(16 + g % 8), 2, '0') || chr(58) || '00.0', g % 8, :start,
    CASE WHEN g % 10 = 0 THEN :half END
FROM generate_series(0, :gpus - 1) AS g
UNION ALL
SELECT 'GPU-' || lpad((:gpus + g / 10)::text, 8, '0') || '-0000-4000-8000-'
        || lpad((:gpus + g / 10)::text, 12, '0'),
    'i-' || lpad((g / 8)::text, 6, '0'), 'bench', 'gpu-node-' || lpad((g / 8)::text, 5, '0'),
    '00000000:' || lpad(to_hex(16 + g % 8), 2, '0') || chr(58) || '00.0', g % 8, :half, NULL
FROM generate_series(0, :gpus - 1, 10) AS g
""",
    # Fault j hits GPU slot (j * 7919) mod gpus at START + j·step; each is a signal link and a
    # remediation link on the GPU in that slot then.
    """
INSERT INTO ledger_links (cluster, subject, ref_id, node, gpu_uuid, machine_id, kind, code, detail,
    at)
SELECT 'bench', s.subject, CASE WHEN s.subject = 'remediation' THEN f.j END,
    'gpu-node-' || lpad((f.slot / 8)::text, 5, '0'),
    'GPU-' || lpad(f.gpu::text, 8, '0') || '-0000-4000-8000-' || lpad(f.gpu::text, 12, '0'),
    'i-' || lpad((f.slot / 8)::text, 6, '0'), 'xid',
    (ARRAY[79, 48, 74, 94, 63, 13, 31, 95])[1 + f.j % 8], '{}'::jsonb, f.at
FROM (
    SELECT j, slot, at,
        CASE WHEN slot % 10 = 0 AND at >= :half THEN :gpus + slot / 10 ELSE slot END AS gpu
    FROM (
        SELECT j, ((j::bigint * 7919) % :gpus)::int AS slot,
            :start + (j::double precision / :faults) * (:end - :start) AS at
        FROM generate_series(0, :faults - 1) AS j
    ) AS raw
) AS f, (VALUES ('signal'), ('remediation')) AS s(subject)
""",
]


def seed(engine: Engine) -> None:
    params: dict[str, Any] = {
        "nodes": NODES,
        "gpus": NODES * GPUS_PER_NODE,
        "faults": FAULTS,
        "start": START,
        "end": END,
        "half": START + (END - START) / 2,
    }
    with engine.begin() as conn:
        for statement in SEED:
            conn.execute(text(statement), params)
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE"))


def _tool(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))), None
    )
    if found is None:
        raise SystemExit(f"{name} not found: install PostgreSQL's client programs")
    return str(found)


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


@contextmanager
def seeded_database() -> Iterator[tuple[str, str]]:
    """The seeded database's URL and how it came to be (seeded, or restored from the cache)."""
    from tests.fixtures.postgres import start_postgres

    server = start_postgres()
    url = server.url(server.create_database())
    try:
        began = time.perf_counter()
        if CACHE.exists():
            subprocess.run(
                [_tool("pg_restore"), "--no-owner", "-j", "2", "-d", _libpq(url), str(CACHE)],
                check=True,
            )
            with db.make_engine(url).connect() as conn:
                conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))
            how = f"restored from {CACHE} in {time.perf_counter() - began:.0f} s"
        else:
            engine = db.make_engine(url)
            db.upgrade(engine)
            seed(engine)
            engine.dispose()
            how = f"seeded in {time.perf_counter() - began:.0f} s"
            subprocess.run([_tool("pg_dump"), "-Fc", "-f", str(CACHE), _libpq(url)], check=True)
        yield url, how
    finally:
        server.stop()


def _scans(plan: Any) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if isinstance(plan, dict):
        if "Relation Name" in plan:
            found.append((plan["Node Type"], plan["Relation Name"]))
        for child in plan.get("Plans", ()):
            found.extend(_scans(child))
    return found


def check_indexed(engine: Engine, uuid: str) -> list[str]:
    """The page's queries on the big tables must use their indexes: stop loudly otherwise."""
    queries = {
        "links": "SELECT * FROM ledger_links WHERE gpu_uuid = :u ORDER BY at",
        "placements": "SELECT * FROM ledger_placements WHERE gpu_uuid = :u ORDER BY from_at",
    }
    seen = []
    with engine.connect() as conn:
        for name, sql in queries.items():
            raw = conn.execute(text(f"EXPLAIN (FORMAT JSON) {sql}"), {"u": uuid}).scalar_one()
            plan = (raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"]
            scans = _scans(plan)
            if any(kind == "Seq Scan" for kind, _ in scans) or not scans:
                raise SystemExit(f"{name}: not the indexed path: {json.dumps(plan, indent=1)}")
            seen.extend(f"{name}: {kind} on {table}" for kind, table in scans)
    return seen


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


def main() -> None:
    from tests.fixtures.web import READONLY_TOKEN, build_console

    with seeded_database() as (url, how):
        engine = db.make_engine(url)
        with engine.connect() as conn:
            links = conn.execute(text("SELECT count(*) FROM ledger_links")).scalar_one()
            uuid, count = conn.execute(
                text(
                    "SELECT gpu_uuid, count(*) FROM ledger_links GROUP BY gpu_uuid "
                    "ORDER BY count(*) DESC, gpu_uuid LIMIT 1"
                )
            ).one()
        paths = check_indexed(engine, uuid)
        console = build_console(url)
        headers = {"authorization": f"Bearer {READONLY_TOKEN}"}
        with TestClient(console.app) as client:

            def get(path: str) -> Callable[[], object]:
                def run() -> None:
                    response = client.get(path, headers=headers)
                    if response.status_code != 200 or uuid not in response.text:
                        raise SystemExit(f"{path}: {response.status_code} {response.text[:300]}")

                return run

            results = [
                ("GPU page /gpus/{uuid}", *timed(get(f"/gpus/{uuid}"))),
                ("GPU API /api/v1/gpus/{uuid}", *timed(get(f"/api/v1/gpus/{uuid}"))),
            ]
        engine.dispose()
    print(
        f"{NODES:,} nodes x {YEARS} years, {NODES * GPUS_PER_NODE * 11 // 10:,} GPUs, "
        f"{FAULTS:,} faults, {links:,} links; {how}"
    )
    print(f"GPU {uuid}: {count} links; plan: {'; '.join(paths)}")
    print(f"{'request':<30}{'median ms':>11}{'p90 ms':>9}  target {TARGET_MS:.0f} ms")
    worst = 0.0
    for name, median, p90 in results:
        worst = max(worst, median)
        print(f"{name:<30}{median:>11.1f}{p90:>9.1f}  {'ok' if median < TARGET_MS else 'SLOW'}")
    print(f"GPU page and API, slowest median: {worst:.1f} ms (target {TARGET_MS:.0f} ms)")
    sys.exit(0 if worst < TARGET_MS else 1)


if __name__ == "__main__":
    main()

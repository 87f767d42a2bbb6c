"""The console's pages and API at a million remediations, over real HTTP. Target: the filtered
list and a detail page under 150 ms at the median.

Method: the same data set as `bench.store_queries` (its `seed`: 1,000,000 remediations over
~350 days with 3 events each, generate_series in SQL, then ANALYZE; BENCH_STORE_ROWS overrides
the count) in a throwaway PostgreSQL, plus the recorded policy sets the seeded rows name. The app
is served by uvicorn on 127.0.0.1 and called with one keep-alive httpx client, as an operator.
Each request runs 2 times to warm up, then 15 times; the table shows the wall-clock median and p90
and the median as a ratio to /healthz (the cost of HTTP and the framework alone) in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import timedelta
from urllib.parse import quote

import httpx
from prometheus_client import CollectorRegistry
from pydantic import SecretStr

from bench.store_queries import CLUSTER, ROWS, START, STEP_SECONDS, seeded_database
from remediator.clock import FakeClock
from remediator.policy.loader import load_policy_dir
from remediator.settings import Settings, WebSettings
from remediator.signals.sources.push import SignalInbox
from remediator.store import db
from remediator.store.repository import Repository
from remediator.web.app import create_app
from remediator.web.deps import WebDeps
from tests.fixtures.web import REPO_ROOT, StaticPolicies, serve

TOKEN = "bench-operator-token"
WARMUP, RUNS = 2, 15
TARGET_MS = 150.0
POLICY_HASHES = 40  # the seed names policy sets h0 … h39


def timed(client: httpx.Client, path: str) -> tuple[float, float]:
    for _ in range(WARMUP):
        client.get(path).raise_for_status()
    samples = []
    for _ in range(RUNS):
        began = time.perf_counter()
        client.get(path).raise_for_status()
        samples.append((time.perf_counter() - began) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.9) - 1]


def cases(client: httpx.Client) -> list[tuple[str, str, bool]]:
    """(name, path, held to the target): the list and detail are; the rest is reported."""
    first = client.get("/api/v1/remediations?in_flight_first=false&limit=50").json()
    cursor = first["next_cursor"]
    for _ in range(200):  # 10,000 rows deep
        cursor = client.get(
            f"/api/v1/remediations?in_flight_first=false&limit=50&cursor={cursor}"
        ).json()["next_cursor"]
    some_id = first["items"][10]["id"]
    end = START + timedelta(seconds=ROWS * STEP_SECONDS)
    week = (
        f"from={quote((end - timedelta(days=200)).isoformat())}"
        f"&to={quote((end - timedelta(days=193)).isoformat())}"
    )
    return [
        ("/healthz (baseline)", "/healthz", False),
        ("list page, in flight first", "/remediations", True),
        ("list, newest first", "/remediations?order=newest", True),
        (
            "list, page 201 (cursor)",
            f"/api/v1/remediations?in_flight_first=false&cursor={cursor}",
            True,
        ),
        ("list, node substring", "/remediations?q=node-0123", True),
        ("list, state failed", "/remediations?state=failed", True),
        ("list, XID 79 in pool-0", "/remediations?xid=79&pool=pool-0", True),
        ("list, thermal, one week", f"/remediations?signal_kind=thermal&{week}", True),
        ("list, dry runs only", "/remediations?dry_run=yes", True),
        ("API list, state held", "/api/v1/remediations?state=held", True),
        ("detail page", f"/remediations/{some_id}", True),
        ("API detail", f"/api/v1/remediations/{some_id}", True),
        ("node page", "/nodes/gpu-node-01234", False),
        ("overview page", "/", False),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", help="an empty PostgreSQL database (default: throwaway)")
    args = parser.parse_args()
    with seeded_database(args.database_url) as (engine, seconds, end):
        clock = FakeClock(end)
        repository = Repository(db.make_session_factory(engine), CLUSTER, clock)
        policies = load_policy_dir(REPO_ROOT / "policies", loaded_at=end)
        for i in range(POLICY_HASHES):
            repository.record_policy_set(
                content_hash=f"h{i}", commit="c0ffee", dirty=False, files=policies.files
            )
        deps = WebDeps(
            settings=Settings(
                cluster_name=CLUSTER, web=WebSettings(operator_tokens=[SecretStr(TOKEN)])
            ),
            repository=repository,
            policies=StaticPolicies(policies),
            inbox=SignalInbox(),
            registry=CollectorRegistry(),
            clock=clock,
        )
        with (
            serve(create_app(deps)) as base,
            httpx.Client(
                base_url=base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60
            ) as client,
        ):
            results = [(name, held, *timed(client, path)) for name, path, held in cases(client)]
    print(f"{ROWS:,} remediations, {3 * ROWS:,} events; seeded in {seconds:.0f} s")
    baseline = results[0][2]
    print(
        f"{'request':<30}{'median ms':>11}{'p90 ms':>9}{'x healthz':>11}  target {TARGET_MS:.0f} ms"
    )
    for name, held, median, p90 in results:
        verdict = ("ok" if median < TARGET_MS else "SLOW") if held else "-"
        print(f"{name:<30}{median:>11.1f}{p90:>9.1f}{median / baseline:>11.1f}  {verdict}")


if __name__ == "__main__":
    main()

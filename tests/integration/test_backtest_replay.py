"""Record a real run — the simulator, the controller on a fake clock, faults injected over two
simulated days — then backtest policy changes against it: the same policies reproduce history
exactly; a lower thermal threshold, a removed XID and a tighter budget each show up where they
should, with node and time."""

from __future__ import annotations

import io
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from remediator.cli import main
from remediator.clock import FakeClock
from remediator.controller.app import Controller
from remediator.model.states import State
from remediator.settings import Settings, WebSettings
from remediator.signals.model import SignalKind
from remediator.signals.sources.base import HealthTracker, SourceResult
from remediator.signals.sources.prometheus import PrometheusSourceConfig, to_signals
from remediator.signals.sources.push import SignalInbox
from remediator.store import db
from remediator.store.repository import Repository
from remediator.web.app import create_app
from remediator.web.deps import WebDeps
from tests.fixtures.sim import SimHandle
from tests.fixtures.web import READONLY_TOKEN, StaticPolicies
from tests.integration.engine_support import settings_for

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 2, tzinfo=UTC)
CYCLE = timedelta(minutes=10)
DAYS = 2

POLICIES = """
policies:
  - name: gpu-hot
    description: A GPU held above its thermal limit.
    why: Above the limit the GPU throttles and fails jobs.
    match:
      kind: thermal
      threshold: {{above: {hot}, for: 20m, gap: 30m}}
    priority: 50
    cooldown: 6h
    actions: &ladder
      - action: notify
      - action: cordon
      - action: drain
        grace: 1s
        timeout: 1m
        on_timeout: force
      - action: replace
  - name: xid-fatal
    description: Fatal XIDs.
    why: The GPU cannot be trusted after these.
    match:
      kind: xid
      codes: {codes}
    priority: 100
    cooldown: 6h
    actions: *ladder
"""

SETTINGS = """
max_unhealthy:
  per_pool: {{percent: 100}}
  cluster: {{percent: 100}}
max_concurrent: {concurrent}
storm_breaker: {{enabled: true, max_new_faults: 10, window: 5m}}
default_cooldown: 1h
"""


def write_policies(
    directory: Path, *, hot: int = 85, codes: str = "[79, 48]", concurrent: int = 10
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "gpu.yaml").write_text(POLICIES.format(hot=hot, codes=codes))
    (directory / "settings.yaml").write_text(SETTINGS.format(concurrent=concurrent))
    return directory


class SimDcgm:
    """The simulator's dcgm-exporter scraped directly and turned into signals by the Prometheus
    source's own `to_signals`: Prometheus itself runs on wall time, the controller here on a
    fake clock."""

    name = "dcgm"

    def __init__(self, metrics_url: str) -> None:
        self._url = metrics_url + "/metrics"
        self._config = PrometheusSourceConfig(url=self._url)
        self._health = HealthTracker(self.name)
        self._http = httpx.Client(timeout=10.0)

    def poll(self, now: datetime) -> SourceResult:
        text = self._http.get(self._url).text
        temps: list[dict[str, Any]] = []
        xids: list[dict[str, Any]] = []
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                series = {"metric": dict(sample.labels), "value": [0, str(sample.value)]}
                if sample.name == "DCGM_FI_DEV_GPU_TEMP":
                    temps.append(series)
                elif sample.name == "DCGM_FI_DEV_XID_ERRORS" and sample.value != 0:
                    xids.append(series)
        thermal, _ = to_signals(SignalKind.THERMAL, temps, self._config, self.name, now)
        xid, _ = to_signals(SignalKind.XID, xids, self._config, self.name, now)
        return self._health.ok(now, (*thermal, *xid))

    def temperature(self, node: str, gpu: int) -> float:
        found = self.poll(datetime.now(UTC)).signals
        return next(
            s.value or 0.0
            for s in found
            if s.kind is SignalKind.THERMAL and s.node == node and s.gpu == gpu
        )

    def close(self) -> None:
        self._http.close()


@dataclass
class Recorded:
    database_url: str
    policies: Path
    since: datetime
    until: datetime
    nodes: list[str]


def inject(sim: SimHandle, dcgm: SimDcgm, fault: dict[str, Any]) -> None:
    """Inject, and for a temperature wait until the GPU reads it: the simulator heats on wall
    time, the controller's cycles pass on the fake clock. A node replaced meanwhile is gone."""
    response = httpx.post(f"{sim.inject_url}/v1/faults", json=fault, timeout=10.0)
    if response.status_code == 404:
        return
    assert response.status_code == 200, response.text
    if fault["type"] == "temperature":
        target = fault["celsius"]
        deadline = time.monotonic() + 30
        while abs(dcgm.temperature(fault["node"], fault["gpu"]) - target) > 3:
            assert time.monotonic() < deadline, f"{fault} never read"
            time.sleep(0.05)


def settle(controller: Controller, clock: FakeClock) -> None:
    """Advance the open remediations until none waits on the simulator's wall-clock work (a
    node being provisioned), the fake clock moving in small steps meanwhile, so it does not
    outrun the simulator into a timeout."""
    deadline = time.monotonic() + 30
    while True:
        controller.advance()
        controller.reconcile()
        waiting = [
            r
            for r in controller.repository.list_open()
            if r.state in (State.REPLACING, State.VERIFYING)
        ]
        if not waiting:
            return
        assert time.monotonic() < deadline, f"still waiting: {waiting}"
        clock.advance(5)
        time.sleep(0.05)


@pytest.fixture
def recorded(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Recorded]:
    sim = sim_factory(nodes=6, gpus_per_node=2, provision_delay=0.5)
    policies = write_policies(tmp_path / "live")
    clock = FakeClock(T0)
    controller = Controller(settings_for(sim, migrated_database_url, policies), clock=clock)
    dcgm = SimDcgm(sim.metrics_url)
    controller.sources.append(dcgm)
    nodes = sorted(n.name for n in controller.kube.list_nodes())
    hot, warm, xid48, a, b = nodes[0], nodes[1], nodes[2], nodes[3], nodes[4]
    # cycle → faults injected before that cycle's poll
    script: dict[int, list[dict[str, Any]]] = {
        10: [{"type": "temperature", "node": hot, "gpu": 0, "celsius": 95, "rate": 100}],
        16: [{"type": "temperature", "node": hot, "gpu": 0, "celsius": 50, "rate": 100}],
        40: [{"type": "temperature", "node": warm, "gpu": 1, "celsius": 81.5, "rate": 100}],
        52: [{"type": "temperature", "node": warm, "gpu": 1, "celsius": 50, "rate": 100}],
        100: [{"type": "xid", "node": xid48, "gpu": 0, "code": 48}],
        103: [{"type": "clear", "node": xid48}],
        150: [
            {"type": "xid", "node": a, "gpu": 1, "code": 79},
            {"type": "xid", "node": b, "gpu": 0, "code": 79},
        ],
        153: [{"type": "clear", "node": a}, {"type": "clear", "node": b}],
    }
    controller.policies.reload_if_changed()
    controller._leading.set()  # leader without the wall-clock scheduler: the test drives it
    controller.reload_policies()
    cycles = int(timedelta(days=DAYS) / CYCLE)
    try:
        for cycle in range(cycles):
            for fault in script.get(cycle, []):
                inject(sim, dcgm, fault)
            controller.poll()
            settle(controller, clock)
            clock.advance(CYCLE.total_seconds())
        until = clock.now()
    finally:
        controller.stop()  # writes the archive's open runs
    yield Recorded(migrated_database_url, policies, T0, until, nodes)


def backtest(recorded: Recorded, proposed: Path, *extra: str) -> dict[str, Any]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(
            [
                "policy",
                "backtest",
                str(proposed),
                "--database",
                recorded.database_url,
                "--since",
                recorded.since.isoformat(),
                "--until",
                recorded.until.isoformat(),
                "--format",
                "json",
                *extra,
            ]
        )
    assert code == 0
    report: dict[str, Any] = json.loads(out.getvalue())
    return report


def test_backtests_against_a_recorded_run(recorded: Recorded, tmp_path: Path) -> None:
    hot, warm, xid48, a, b = recorded.nodes[:5]

    # (a) The same policies, against the versions really active: nothing differs, and the
    # baseline replay reproduces every real remediation.
    same = backtest(recorded, recorded.policies)
    assert same["history"]["remediations"] >= 4
    assert same["added"] == same["removed"] == same["changed"] == []
    assert same["mismatches"] == []
    real_nodes = {hot, xid48, a, b}
    assert real_nodes <= set(same["out_of_service"]["baseline"])
    assert warm not in same["out_of_service"]["baseline"]

    # (b) A lower thermal threshold catches the warm GPU too.
    lowered = backtest(
        recorded, write_policies(tmp_path / "lowered", hot=76), "--baseline", str(recorded.policies)
    )
    assert lowered["mismatches"] == []
    added = [(i["node"], i["policy"]) for i in lowered["added"]]
    assert (warm, "gpu-hot") in added
    first = next(i for i in lowered["added"] if i["node"] == warm)
    start = recorded.since + 40 * CYCLE
    assert start <= datetime.fromisoformat(first["time"]) <= start + 6 * CYCLE
    assert lowered["removed"] == []

    # (c) Without XID 48 the node that had it is not remediated.
    narrower = backtest(recorded, write_policies(tmp_path / "no48", codes="[79]"))
    removed = [(i["node"], i["policy"]) for i in narrower["removed"]]
    assert removed == [(xid48, "xid-fatal")]
    when = datetime.fromisoformat(narrower["removed"][0]["time"])
    assert recorded.since + 100 * CYCLE <= when <= recorded.since + 101 * CYCLE
    assert narrower["added"] == []

    # The same change as a working copy against its git HEAD (what a CI job on a PR runs).
    repo = tmp_path / "repo"
    write_policies(repo / "policies")
    for argv in (
        ["init", "-q"],
        ["add", "."],
        ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "policies"],
    ):
        subprocess.run(["git", "-C", str(repo), *argv], check=True, capture_output=True)
    write_policies(repo / "policies", codes="[79]")
    against_head = backtest(recorded, repo / "policies", "--baseline-ref", "HEAD")
    assert against_head["removed"] == narrower["removed"]

    # (d) One remediation at a time: the second of the simultaneous XID 79s is held.
    tighter = backtest(recorded, write_policies(tmp_path / "one", concurrent=1))
    holds = tighter["holds"]["added"]
    assert holds, tighter
    assert {h["node"] for h in holds} & {a, b}
    assert all("max concurrent" in h["detail"] for h in holds)
    assert tighter["per_policy"]["xid-fatal"]["holds_added"] >= 1

    # The markdown a CI job posts names the same differences.
    out = io.StringIO()
    with redirect_stdout(out):
        assert (
            main(
                [
                    "policy",
                    "backtest",
                    str(tmp_path / "no48"),
                    "--database",
                    recorded.database_url,
                    "--since",
                    recorded.since.isoformat(),
                    "--until",
                    recorded.until.isoformat(),
                    "--format",
                    "markdown",
                ]
            )
            == 0
        )
    assert xid48 in out.getvalue() and "Removed remediations (1)" in out.getvalue()


def test_an_export_replays_like_the_database(recorded: Recorded, tmp_path: Path) -> None:
    export = tmp_path / "signals.jsonl.gz"
    assert (
        main(
            [
                "signals",
                "export",
                "--database",
                recorded.database_url,
                "--since",
                recorded.since.isoformat(),
                "--until",
                recorded.until.isoformat(),
                "--output",
                str(export),
            ]
        )
        == 0
    )
    proposed = write_policies(tmp_path / "lowered", hot=76)
    from_db = backtest(recorded, proposed)
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(
            ["policy", "backtest", str(proposed), "--signals", str(export), "--format", "json"]
        )
    assert code == 0
    from_file = json.loads(out.getvalue())
    for key in ("added", "removed", "changed", "mismatches"):
        assert from_file[key] == from_db[key], key
    assert from_file["added"]


def test_the_console_shows_a_backtest(recorded: Recorded, tmp_path: Path) -> None:
    proposed = write_policies(tmp_path / "no48", codes="[79]")
    engine = db.make_engine(recorded.database_url)
    clock = FakeClock(recorded.until)
    deps = WebDeps(
        settings=Settings(
            web=WebSettings(readonly_tokens=[SecretStr(READONLY_TOKEN)]),
            backtest_dirs={"drop-xid-48": proposed},
        ),
        repository=Repository(db.make_session_factory(engine), "default", clock),
        policies=StaticPolicies(None),
        inbox=SignalInbox(capacity=10),
        registry=CollectorRegistry(),
        clock=clock,
    )
    auth = {"Authorization": f"Bearer {READONLY_TOKEN}"}
    try:
        with TestClient(create_app(deps)) as client:
            page = client.get(
                "/backtest", params={"dir": "drop-xid-48", "days": DAYS}, headers=auth
            )
            assert page.status_code == 200, page.text
            removed = page.text.split("Removed remediations (1)")[1]
            assert recorded.nodes[2] in removed.split("</table>")[0]
            assert "Backtest differences per day" in page.text and "removed: 1" in page.text
            assert "reproduced by the baseline replay" in page.text

            report = backtest(recorded, write_policies(tmp_path / "lowered", hot=76))
            shown = client.post("/backtest", data={"report": json.dumps(report)}, headers=auth)
            assert shown.status_code == 200, shown.text
            added = shown.text.split("Added remediations (")[1].split("</table>")[0]
            assert recorded.nodes[1] in added and "gpu-hot" in added

            bad = client.post("/backtest", data={"report": '{"added": 3}'}, headers=auth)
            assert bad.status_code == 422 and "not a backtest report" in bad.text
    finally:
        engine.dispose()

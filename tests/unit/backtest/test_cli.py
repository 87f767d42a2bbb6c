"""`policy backtest` and `signals export` choose their cluster and refuse to report "no change"
over a record that holds nothing: a wrong cluster name or an empty window is an error naming
what the record does hold."""

from __future__ import annotations

import gzip
import json
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine

from remediator.cli import main
from remediator.signals.model import Signal, SignalKind
from remediator.store import db
from remediator.store.archive import NodeSnapshot, SignalArchive

T0 = datetime(2026, 6, 1, tzinfo=UTC)
POLL = timedelta(seconds=30)
POLICIES = """
policies:
  - name: hot
    description: hot GPU
    why: it throttles
    match:
      kind: thermal
      threshold: {above: 80, for: 2m}
    actions: [{action: cordon}]
"""
SETTINGS = "max_unhealthy: {per_pool: {percent: 100}, cluster: {percent: 100}}\n"


@pytest.fixture
def database(sqlite_head_template: Path, tmp_path: Path) -> Iterator[str]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    url = f"sqlite:///{tmp_path / 'remediator.db'}"
    engine: Engine = db.make_engine(url)
    yield url
    engine.dispose()


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "p.yaml").write_text(POLICIES)
    (directory / "settings.yaml").write_text(SETTINGS)
    return directory


def record(url: str, cluster: str, cycles: int = 20) -> None:
    """A few cycles of one node's GPU, hot from the fifth on."""
    engine = db.make_engine(url)
    archive = SignalArchive(db.make_session_factory(engine), cluster)
    nodes = {"n1": NodeSnapshot("p", {}, True, False)}
    for cycle in range(cycles):
        at = T0 + cycle * POLL
        value = 90.0 if cycle >= 5 else 60.0
        signal = Signal(
            node="n1", kind=SignalKind.THERMAL, source="dcgm", observed_at=at, gpu=0, value=value
        )
        archive.record([signal], nodes, at)
    engine.dispose()


def run(
    capsys: pytest.CaptureFixture[str], *argv: str, window: bool = True
) -> tuple[int, str, str]:
    span = ["--since", T0.isoformat(), "--until", (T0 + timedelta(hours=1)).isoformat()]
    code = main([*argv, *(span if window else [])])
    out, err = capsys.readouterr()
    return code, out, err


def backtest(policies: Path, *argv: str) -> list[str]:
    return ["policy", "backtest", str(policies), "--baseline", str(policies), *argv]


def test_the_only_cluster_is_the_default(
    database: str, policies: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(database, "demo")
    code, out, err = run(capsys, *backtest(policies, "--database", database, "--format", "json"))
    assert code == 0, err
    report = json.loads(out)
    assert report["baseline"]["readings"] > 0
    assert report["baseline"]["remediations"] == 1


def test_a_cluster_without_data_is_refused_naming_those_with(
    database: str, policies: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(database, "demo")
    code, out, err = run(capsys, *backtest(policies, "--database", database, "--cluster", "prod"))
    assert code == 1 and out == ""
    assert "'prod' has no archived signals" in err and "clusters with data: demo" in err


def test_an_empty_window_is_refused(
    database: str, policies: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    record(database, "demo")
    earlier = ["--since", (T0 - timedelta(days=2)).isoformat(), "--until", T0.isoformat()]
    code, out, err = run(
        capsys, *backtest(policies, "--database", database, *earlier), window=False
    )
    assert code == 1 and out == ""
    assert "no signal readings between" in err

    export = tmp_path / "signals.jsonl.gz"
    code, _, err = run(
        capsys,
        "signals",
        "export",
        "--database",
        database,
        "--output",
        str(export),
        *earlier,
        window=False,
    )
    assert code == 0, err
    code, out, err = run(capsys, *backtest(policies, "--signals", str(export)), window=False)
    assert code == 1 and out == ""
    assert "no signal readings between" in err


def test_all_clusters_each_on_its_own(
    database: str, policies: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    record(database, "east")
    record(database, "west", cycles=4)  # never hot for long: nothing opens there
    code, _, err = run(capsys, *backtest(policies, "--database", database))
    assert code == 1 and "several clusters (east, west)" in err and "--cluster all" in err

    code, out, err = run(
        capsys, *backtest(policies, "--database", database, "--cluster", "all", "--format", "json")
    )
    assert code == 0, err
    reports = json.loads(out)["clusters"]
    assert {name: r["baseline"]["remediations"] for name, r in reports.items()} == {
        "east": 1,
        "west": 0,
    }

    export = tmp_path / "all.jsonl.gz"
    code, _, err = run(
        capsys,
        "signals",
        "export",
        "--database",
        database,
        "--cluster",
        "all",
        "--output",
        str(export),
    )
    assert code == 0, err
    headers = [
        json.loads(line)
        for line in gzip.decompress(export.read_bytes()).decode().splitlines()
        if '"type":"header"' in line
    ]
    assert [h["cluster"] for h in headers] == ["east", "west"]
    code, out, err = run(
        capsys,
        *backtest(policies, "--signals", str(export), "--cluster", "all", "--format", "json"),
        window=False,
    )
    assert code == 0, err
    from_file = json.loads(out)["clusters"]
    assert {name: r["added"] for name, r in from_file.items()} == {
        name: r["added"] for name, r in reports.items()
    }
    code, out, err = run(
        capsys, *backtest(policies, "--signals", str(export), "--cluster", "west"), window=False
    )
    assert code == 0, err
    assert "baseline" in out and "=== cluster" not in out

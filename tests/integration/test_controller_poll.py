"""The controller composed against the simulator, not started: one poll cycle (the node-condition
source's LIST also builds the inventory, so a poll costs the API server one LIST of nodes), and
what a replica that does not lead does with metrics and pushed signals."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr

from remediator.controller.app import Controller
from remediator.kube.client import KubeClient
from remediator.kube.objects import Node
from remediator.signals.interest import Interest
from remediator.signals.model import SignalKind
from remediator.signals.sources.base import SourceHealth, SourceResult
from remediator.store.records import NewRemediation
from remediator.web.app import create_app
from tests.fixtures.sim import SimHandle
from tests.integration.engine_support import settings_for, write_policies

pytestmark = pytest.mark.integration


def git(cwd: Path, *args: str) -> str:
    identity = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid"}
    identity |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    done = subprocess.run(
        ["git", *args], cwd=cwd, env={**os.environ, **identity}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture
def controller(sim: SimHandle, sqlite_head_template: Path, tmp_path: Path) -> Iterator[Controller]:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    url = f"sqlite:///{tmp_path / 'remediator.db'}"
    settings = settings_for(sim, url, write_policies(tmp_path / "policies"))
    kube = KubeClient.from_kubeconfig(sim.controller_kubeconfig, timeout=5.0)
    built = Controller(settings, kube=kube)
    yield built
    built.stop()


def test_polls_read_the_node_watch_cache_not_a_list_each(
    controller: Controller, sim: SimHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str | None] = []
    real = controller.kube.list_nodes

    def counted(label_selector: str | None = None) -> list[Node]:
        calls.append(label_selector)
        return real(label_selector)

    monkeypatch.setattr(controller.kube, "list_nodes", counted)
    for _ in range(3):
        controller.poll()
    assert calls == []
    assert controller.nodes.lists == 1  # the informer's one LIST, then its watch
    inventory = controller.inventory
    assert inventory is not None
    shown = sim.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}").split()
    assert sorted(inventory.pools) == sorted(shown)

    sim.kubectl("cordon", shown[0])
    deadline = time.monotonic() + 30
    while shown[0] not in controller.refresh_inventory().cordoned:
        assert time.monotonic() < deadline, "the watch never delivered the cordon"
        time.sleep(0.1)
    assert calls == [] and controller.nodes.lists == 1


def test_the_first_read_after_start_up_waits_for_the_node_cache(
    controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large fleet's paged LIST takes a moment: the first poll must not call the node source
    down because it ran before the cache's first LIST (started by start-up) ended."""
    real = controller.kube.list_nodes_versioned

    def slow(page_size: int = 500) -> tuple[list[Node], str]:
        time.sleep(1.0)  # the LIST's own duration, not a wait for an event
        return real(page_size)

    monkeypatch.setattr(controller.kube, "list_nodes_versioned", slow)
    controller.start(serve_web=False)
    assert controller.nodes.list_nodes()  # synced: no "node cache not synced yet"


def test_a_cancellation_is_counted_once_at_its_transition(
    controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counted by the replica whose console ran the cancel, right then: a remediation opened
    and cancelled between two metric refreshes is counted too, and a refresh (on any replica,
    the leader's included) never counts it again."""
    repo = controller.repository
    token = "op-token-0123456789"
    controller.settings.web.operator_tokens = [SecretStr(token)]

    def cancelled_count() -> float | None:
        return controller.registry.get_sample_value(
            "remediator_remediations_finished_total", {"outcome": "cancelled", "policy": "xid-79"}
        )

    made = repo.create(
        NewRemediation(
            node="gpu-x", policy="xid-79", reason="test", signals=(), ladder=[], signal_kind="xid"
        ),
        actor="test",
    )
    with TestClient(create_app(controller.web_deps())) as client:
        response = client.post(
            f"/api/v1/remediations/{made.id}/cancel",
            headers={"Authorization": f"Bearer {token}"},
        )
    assert response.status_code == 200, response.text
    assert cancelled_count() == 1
    monkeypatch.setattr(controller, "is_leader", lambda: True)
    controller.refresh_metrics()
    assert cancelled_count() == 1


def test_a_follower_refuses_pushed_signals_so_the_sender_retries_at_the_leader(
    controller: Controller,
) -> None:
    """Only the leader drains the inbox: a follower accepting a push would sit on the signal."""
    url = controller.start_web()
    signal = {
        "node": "gpu-x",
        "kind": "xid",
        "code": 79,
        "source": "push",
        "observed_at": datetime.now(UTC).isoformat(),
    }
    headers = {"Authorization": "Bearer operator-token"}
    response = httpx.post(f"{url}/api/v1/signals", json=[signal], headers=headers, timeout=10)
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "5"
    assert "does not lead" in response.json()["reason"]
    assert len(controller.inbox) == 0


def test_a_new_commit_of_the_same_policies_is_recorded(
    controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New remediations record the active commit, so the policy-set history must know it even
    when the commit left the policy files' text unchanged."""
    directory = controller.settings.policies_dir
    git(directory, "init", "-q")
    git(directory, "add", ".")
    git(directory, "commit", "-q", "-m", "policies")
    monkeypatch.setattr(controller, "is_leader", lambda: True)
    controller.reload_policies()
    first = controller.repository.latest_policy_set()
    assert first is not None and first.commit == git(directory, "rev-parse", "HEAD")

    git(directory, "commit", "-q", "--allow-empty", "-m", "elsewhere in the repository")
    for path in directory.iterdir():  # a git-sync checkout is a fresh worktree
        if path.is_file():
            stat = path.stat()
            os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    controller.reload_policies()
    second = controller.repository.latest_policy_set()
    assert second is not None and second.content_hash == first.content_hash
    assert second.commit == git(directory, "rev-parse", "HEAD") != first.commit


def test_a_refused_commit_is_recorded_with_its_commit(
    controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = controller.settings.policies_dir
    monkeypatch.setattr(controller, "is_leader", lambda: True)
    controller.reload_policies()
    good = controller.policies.active
    assert good is not None
    git(directory, "init", "-q")
    (directory / "xid.yaml").write_text("policies:\n  - name: broken\n    surprise: 1\n")
    git(directory, "add", ".")
    git(directory, "commit", "-q", "-m", "a bad edit")
    controller.reload_policies()
    refused = controller.repository.latest_policy_set()
    assert refused is not None and refused.status == "refused"
    assert refused.commit == git(directory, "rev-parse", "HEAD") and not refused.dirty
    assert "xid.yaml:" in (refused.error or "")
    assert controller.policies.active is good  # the last good set stays in force


class InterestRecorder:
    """A source that records what the controller narrows it to."""

    name = "recorder"

    def __init__(self) -> None:
        self.interests: list[Interest] = []

    def set_interest(self, interest: Interest) -> None:
        self.interests.append(interest)

    def poll(self, now: datetime) -> SourceResult:
        return SourceResult((), SourceHealth(self.name, True, now, now))


def test_sources_are_narrowed_to_the_policy_set_and_again_when_it_changes(
    sim: SimHandle, sqlite_head_template: Path, tmp_path: Path
) -> None:
    shutil.copyfile(sqlite_head_template, tmp_path / "remediator.db")
    policies = write_policies(tmp_path / "policies")
    settings = settings_for(sim, f"sqlite:///{tmp_path / 'remediator.db'}", policies)
    recorder = InterestRecorder()
    controller = Controller(settings, sources=[recorder])
    try:
        controller.reload_policies()
        controller.poll()
        controller.poll()
        assert len(recorder.interests) == 1  # once per policy set, not per poll
        assert recorder.interests[0].kinds == frozenset({SignalKind.XID})
        assert recorder.interests[0].readings == {}

        (policies / "thermal.yaml").write_text(HEAT)
        controller.reload_policies()
        controller.poll()
        latest = recorder.interests[-1]
        assert len(recorder.interests) == 2
        assert latest.kinds == frozenset({SignalKind.XID, SignalKind.THERMAL})
        assert latest.readings[SignalKind.THERMAL].at_least == 75.0
    finally:
        controller.stop()


HEAT = """\
policies:
  - name: heat
    description: hot for two minutes
    why: heat kills GPUs
    match: {kind: thermal, threshold: {above: 78, clear: 75, for: 2m}}
    actions: [{action: cordon}]
"""


def test_a_scrape_sets_the_gauges_from_the_store_without_a_housekeeping_tick(
    controller: Controller,
) -> None:
    """The store-backed gauges are read when /metrics is asked, not by a periodic tick: a pause
    written a moment ago (by any replica) shows in the very next scrape."""
    with TestClient(create_app(controller.web_deps())) as client:
        assert "remediator_paused 0.0" in client.get("/metrics").text
        controller.repository.pause(by="test", reason="maintenance")
        assert "remediator_paused 1.0" in client.get("/metrics").text

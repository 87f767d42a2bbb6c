"""The fence owner against the simulator with the real controller (docs/safety.md):
- I1: a replacement that failed validation, its remediation held at max_replacements, is not
  ended by `node_gone` (its own replacement took the node) and never serves; a cancel leaves
  the failed machine fenced until an operator releases it, with a reason;
- I2: a second controller on an empty database releases nothing and lists the foreign fence;
- I3: a human's uncordon (and taint removal) of a held node is re-asserted within one poll and
  written on its timeline; with `on_drift: report` it is only reported; a Slurm drain wiped by
  slurmctld restarted with `-c` is put back."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from remediator.doctor.report import Status
from remediator.doctor.run import doctor
from remediator.fences.marks import ANN_STORE, Owner
from remediator.fences.owner import DRIFT_EVENT, FenceRefused
from remediator.model.states import State
from remediator.remediation import commands
from remediator.store.db import upgrade
from remediator.store.fences import FenceAction
from remediator.store.optouts import Asker
from remediator.web.app import create_app
from tests.fixtures.sim import FAST_PROGRAMS, SimHandle
from tests.fixtures.slurm import SlurmShell
from tests.integration.engine_support import (
    OPERATOR_HEADERS,
    Engine,
    start_engine,
    wait_for,
    xid,
)
from tests.integration.test_engine_slurm import stop_slurmctld
from tests.integration.test_engine_validate import H100, POOL, policies, pool_node

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

REPLACE_ONCE = f"""
policies:
  - name: xid-79
    description: The GPU has fallen off the bus.
    why: A GPU off the bus is dead to every job on the node.
    match: {{kind: xid, codes: [79]}}
    priority: 100
    actions:
      - action: cordon
      - action: drain
        grace: 1s
        timeout: 1m
        on_timeout: force
      - action: replace
      - action: validate
        dcgm_level_new: 2
        max_replacements: 1
        busbw_floor: {{"{H100}": 400}}
"""
CORDON_ONLY = """
policies:
  - name: xid-79-hold
    description: Fence and wait for a human.
    why: The operator decides.
    match: {kind: xid, codes: [79]}
    priority: 100
    actions:
      - action: cordon
"""
OPERATOR = Asker("alice", "test")


def fenced(engine: Engine, name: str) -> bool:
    node = engine.node(name)
    assert node is not None, f"{name} is gone"
    taints = {t["key"] for t in node["spec"].get("taints") or []}
    return bool(node["spec"].get("unschedulable")) and "remediator.io/quarantine" in taints


def fresh_sqlite(tmp: Path, name: str) -> str:
    url = f"sqlite:///{tmp / name}"
    upgrade(url)
    return url


@pytest.fixture
def started(
    sim_factory: Callable[..., SimHandle], tmp_path: Path
) -> Iterator[Callable[..., Engine]]:
    engines: list[Engine] = []
    sims: dict[str, SimHandle] = {}

    def start(text: str, db: str = "first.db", **overrides: Any) -> Engine:
        if "sim" not in sims:
            sims["sim"] = sim_factory(
                nodes=4, provision_delay=1.0, reboot_delay=1.0, program_time_scale=FAST_PROGRAMS
            )
        url = fresh_sqlite(tmp_path, db)
        engine = start_engine(sims["sim"], url, policies(tmp_path, text), **overrides)
        engines.append(engine)
        return engine

    yield start
    for engine in engines:
        engine.close()


def test_a_slurm_drain_wiped_by_slurmctld_restarted_with_c_is_put_back(
    sim_factory: Callable[..., SimHandle], tmp_path: Path
) -> None:
    sim = sim_factory(nodes=4, provision_delay=1.0, slurm=True)
    assert sim.slurm is not None
    conf = Path(sim.slurm["slurm_conf"])
    shell = SlurmShell(conf)
    engine = start_engine(
        sim, fresh_sqlite(tmp_path, "slurm.db"), policies(tmp_path, CORDON_ONLY), slurm=sim.slurm
    )
    restarted: subprocess.Popen[bytes] | None = None
    try:
        node, remediation_id = held(engine)
        assert "DRAIN" in shell.node(node)["State"]
        engine.controller.reconcile()
        stop_slurmctld(shell, conf)
        restarted = subprocess.Popen(
            ["slurmctld", "-D", "-c", "-f", str(conf), "-i"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for(lambda: shell.run("sinfo", check=False).returncode == 0, 60, "slurmctld back (-c)")

        def drift_noted() -> bool:
            record = engine.repository.get(remediation_id)
            return any(
                e.action == DRIFT_EVENT and "slurm_resumed" in e.detail["drift"]
                for e in record.events
            )

        # slurmctld -c forgets the drain; the next reconcile pass (10 s) puts it back.
        wait_for(drift_noted, 45, "the wiped drain noticed")
        assert "DRAIN" in shell.node(node)["State"], shell.node(node)
        assert shell.node(node)["Reason"].startswith(f"remediator #{remediation_id}:")
    finally:
        engine.close()
        if restarted is not None:
            restarted.terminate()
            restarted.wait(timeout=60)


def held(engine: Engine, text: str = CORDON_ONLY) -> tuple[str, int]:
    node = pool_node(engine.sim)
    engine.fault({"type": "xid", "node": node, "gpu": 0, "code": 79})
    engine.push(xid(node))
    record = engine.wait_state(node, State.HELD, State.FAILED, State.SUCCEEDED, timeout=120)
    assert record.state is State.HELD, (record.error, record.hold_reason)
    assert fenced(engine, node)
    return node, record.id


def test_a_failed_replacement_held_at_max_replacements_stays_fenced_until_an_operator(
    started: Callable[..., Engine],
) -> None:
    engine = started(REPLACE_ONCE)
    node = pool_node(engine.sim)
    engine.nodepool_fault(
        {"type": "doa_next", "pool": POOL, "fault": {"type": "xid", "gpu": 2, "code": 79}}
    )
    engine.fault({"type": "xid", "node": node, "gpu": 0, "code": 79})
    engine.push(xid(node))
    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)
    assert done.state is State.HELD, (done.error, done.hold_reason)
    bad = done.new_node
    assert bad and engine.node(node) is None, "the replacement took the old node away"

    for _ in range(3):
        engine.controller.reconcile()
    after = engine.repository.get(done.id)
    assert after.state is State.HELD, "node_gone must not end what its own replacement did"
    assert fenced(engine, bad), "the machine that failed validation never serves"

    commands.run(engine.repository, "cancel", done.id, actor="alice", reason="give up")
    engine.controller.reconcile()
    assert fenced(engine, bad), "a cancel does not return a machine that failed validation"
    (view,) = [v for v in engine.controller.fences.views() if v.node == bad]
    assert [n.kind.value for n in view.needs] == ["failed_validation"]

    fences = engine.controller.fences
    with pytest.raises(FenceRefused) as no_reason:
        fences.command(
            bad, FenceAction.RELEASE, reason=" ", asker=OPERATOR, node_known=lambda _n: True
        )
    assert no_reason.value.status == 422
    with pytest.raises(FenceRefused) as unknown:
        fences.command(
            "no-such-node",
            FenceAction.RELEASE,
            reason="x",
            asker=OPERATOR,
            node_known=engine.controller.nodes.knows,
        )
    assert unknown.value.status == 404
    assert fenced(engine, bad), "a refused command changes nothing"

    fences.command(
        bad,
        FenceAction.RELEASE,
        reason="vendor swapped the GPU",
        asker=OPERATOR,
        node_known=engine.controller.nodes.knows,
    )
    engine.controller.reconcile()
    assert not fenced(engine, bad), "an operator's release with a reason lifts it"


def test_a_second_controller_on_an_empty_database_releases_nothing(
    started: Callable[..., Engine],
) -> None:
    first = started(CORDON_ONLY)
    node, _ = held(first)
    assert first.node(node)["metadata"]["annotations"][ANN_STORE] == (
        first.controller.fence_book.store_id()
    )

    second = started(CORDON_ONLY, db="second.db")
    assert second.controller.fence_book.store_id() != first.controller.fence_book.store_id()
    for _ in range(2):
        second.controller.reconcile()
    assert fenced(second, node), "a fence of another store's history is never released"
    (foreign,) = second.controller.fences.foreign()
    assert foreign.node == node and foreign.owner is Owner.FOREIGN
    assert "another store" in foreign.why
    (finding,) = [f for f in doctor(second.controller.settings).findings if f.area == "fences"]
    assert finding.status is Status.WARN and "1 node(s) fenced by another history" in finding.found

    with TestClient(create_app(second.controller.web_deps())) as api:
        listed = api.get("/api/v1/fences", headers=OPERATOR_HEADERS).json()["items"]
        assert [(f["node"], f["owner"]) for f in listed] == [(node, "foreign")]
        url = f"/api/v1/fences/{node}"
        refused = [
            api.post(url, json={"action": "adopt"}, headers=OPERATOR_HEADERS),
            api.post(url, json={"action": "adopt", "reason": " "}, headers=OPERATOR_HEADERS),
            api.post(url, json={"action": "burn", "reason": "x"}, headers=OPERATOR_HEADERS),
            api.post(
                "/api/v1/fences/no-such-node",
                json={"action": "fence", "reason": "x"},
                headers=OPERATOR_HEADERS,
            ),
            api.post(url, json={"action": "adopt", "reason": "x"}),
        ]
        assert [r.status_code for r in refused] == [422, 422, 422, 404, 401]
        assert second.controller.fence_book.decisions() == [], "a refused request writes nothing"
        # ...but an audit row each, once the asker is known (a 401 names no one).
        rows = api.get("/api/v1/audit", headers=OPERATOR_HEADERS).json()["items"]
        assert [(r["command"], r["outcome"]) for r in rows] == [
            ("fence_fence", "not_found"),
            ("fence", "refused"),
            ("fence", "refused"),
            ("fence", "refused"),
        ]
        assert rows[1]["detail"].startswith("malformed request: body.action")
        adopted = api.post(
            url,
            json={"action": "adopt", "reason": "restored from backup; keep it fenced"},
            headers=OPERATOR_HEADERS,
        )
        assert adopted.status_code == 201, adopted.text
    second.controller.reconcile()
    assert fenced(second, node)
    assert second.controller.fences.foreign() == []
    marks = second.node(node)["metadata"]["annotations"]
    assert marks[ANN_STORE] == second.controller.fence_book.store_id()


def test_a_human_uncordon_of_a_held_node_is_reasserted_within_one_poll(
    started: Callable[..., Engine],
) -> None:
    engine = started(CORDON_ONLY)
    node, remediation_id = held(engine)
    engine.controller.reconcile()  # the fence is known due
    engine.sim.kubectl("uncordon", node)
    engine.sim.kubectl("taint", "node", node, "remediator.io/quarantine-")
    # The informer's event wakes the reconcile: well inside one poll interval of 10 s.
    wait_for(lambda: fenced(engine, node), timeout=8, what=f"{node} fenced again")
    record = engine.repository.get(remediation_id)
    drift = [e for e in record.events if e.action == DRIFT_EVENT]
    assert drift and drift[0].detail["reasserted"] is True
    assert {"uncordoned"} <= set(drift[0].detail["drift"])
    counted = engine.controller.registry.get_sample_value(
        "remediator_fence_drift_total", {"kind": "uncordoned"}
    )
    assert counted is not None and counted >= 1


def test_with_on_drift_report_a_lost_fence_is_only_reported(
    started: Callable[..., Engine],
) -> None:
    engine = started(CORDON_ONLY, fences={"on_drift": "report"})
    node, remediation_id = held(engine)
    engine.controller.reconcile()
    engine.sim.kubectl("uncordon", node)

    def reported() -> bool:
        record = engine.repository.get(remediation_id)
        return any(e.action == DRIFT_EVENT for e in record.events)

    wait_for(reported, timeout=8, what="the drift on the timeline")
    for _ in range(2):
        engine.controller.reconcile()
    record = engine.repository.get(remediation_id)
    lines = [e for e in record.events if e.action == DRIFT_EVENT]
    assert len(lines) == 1 and lines[0].detail["reasserted"] is False, "said once"
    node_now = engine.node(node)
    assert node_now is not None and not node_now["spec"].get("unschedulable")

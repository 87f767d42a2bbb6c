"""Burn-in end to end with the controller's real jobs against the simulator, whose nodes run
the real programs' output formats (dcgmi, all_reduce_perf, nvidia-smi, ibstat):
- a persistent XID 79 whose first replacement arrives dead (`doa_next`) ends `succeeded` on the
  second replacement: two replacement operations, the failed validation with its evidence on the
  timeline, and the bad machine fenced from the moment it was known until it left;
- a repaired node with a slow NVLink fails its validation and goes on to replacement;
- a validation Job whose log holds none of the checks' sections (an operator's template that
  runs something else) fails every check with the log's tail, never passes;
- with `nccl_pair` on, a pool with no validated node skips the two-node check and says so, and
  the next remediation pairs its new machine with the first one's, which passed by then;
- a validation Job the node cannot schedule holds with the node's reason, kept current, and the
  remediation goes on by itself with the same Job once the node lets it run."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remediator.actions.jobs import DEFAULT_TEMPLATE
from remediator.model.states import State
from tests.fixtures.sim import FAST_PROGRAMS, SimHandle
from tests.integration.engine_support import Engine, start_engine, wait_for, xid

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

POOL = "h100-train"
H100 = "NVIDIA H100 80GB HBM3"
SETTINGS = """
max_unhealthy:
  per_pool: {percent: 100}
  cluster: {percent: 100}
max_concurrent: 10
storm_breaker: {enabled: false}
default_cooldown: 1h
"""
REPLACE = f"""
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
        busbw_floor: {{"{H100}": 400}}
"""
REPAIR = f"""
policies:
  - name: nvlink-repair
    description: NVLink errors; a reboot may clear them.
    why: A link that errs slows every collective of the node.
    match: {{kind: xid, codes: [74]}}
    priority: 100
    on_failure: replace
    actions:
      - action: cordon
      - action: drain
        grace: 1s
        timeout: 1m
        on_timeout: force
      - action: reboot
        timeout: 2m
      - action: validate
        dcgm_level: 1
        busbw_floor: {{"{H100}": 400}}
      - action: uncordon
"""


def policies(tmp: Path, text: str) -> Path:
    directory = tmp / "policies"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "p.yaml").write_text(text)
    (directory / "settings.yaml").write_text(SETTINGS)
    return directory


def pool_node(sim: SimHandle) -> str:
    names = sim.kubectl("get", "nodes", "-l", f"simcloud.io/nodepool={POOL}", "-o", "name")
    return names.split()[0].removeprefix("node/")


class Watcher:
    """Samples every node of the pool while the test runs: who was ever seen schedulable."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.schedulable: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                nodes = self._engine.controller.kube.list_nodes(f"simcloud.io/nodepool={POOL}")
            except Exception:  # a missed sample only weakens the check
                continue
            for node in nodes:
                fenced = node.unschedulable or any(
                    t.key.startswith(("remediator.io/", "node.kubernetes.io/")) for t in node.taints
                )
                if node.ready and not fenced:
                    self.schedulable.add(node.name)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture
def started(
    sim_factory: Callable[..., SimHandle], migrated_database_url: str, tmp_path: Path
) -> Iterator[Callable[..., Engine]]:
    engines: list[Engine] = []

    def start(text: str, **overrides: Any) -> Engine:
        sim = sim_factory(
            nodes=4, provision_delay=1.0, reboot_delay=1.0, program_time_scale=FAST_PROGRAMS
        )
        engine = start_engine(sim, migrated_database_url, policies(tmp_path, text), **overrides)
        engines.append(engine)
        return engine

    yield start
    for engine in engines:
        engine.close()


def actions(events: Any, name: str) -> list[Any]:
    return [e for e in events if e.action == name]


def test_a_dead_on_arrival_replacement_is_replaced_again(started: Callable[[str], Engine]) -> None:
    engine = started(REPLACE)
    node = pool_node(engine.sim)
    engine.nodepool_fault(
        {"type": "doa_next", "pool": POOL, "fault": {"type": "xid", "gpu": 2, "code": 79}}
    )
    watcher = Watcher(engine)
    try:
        engine.fault({"type": "xid", "node": node, "gpu": 0, "code": 79})
        engine.push(xid(node))
        done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)
    finally:
        watcher.stop()
    assert done.state is State.SUCCEEDED, (done.error, done.hold_reason)

    replaced = actions(done.events, "replace_done")
    assert len(replaced) == 2
    ops = {e.detail["operation_id"] for e in replaced}
    assert len(ops) == 2, "two replacement operations"
    bad, good = (e.detail["new_node"] for e in replaced)
    assert replaced[1].detail["node"] == bad, "the second replacement takes out the bad machine"

    (failed,) = actions(done.events, "validate_failed")
    assert failed.detail["node"] == bad and failed.detail["replaced_again"] == bad
    assert "GPU 2" in failed.detail["reason"], failed.detail
    checks = [c for c in failed.detail["checks"] if not c["passed"]]
    assert checks and checks[0]["seconds"] >= 0
    lines = [e.detail for e in actions(done.events, "validation_check") if e.detail["node"] == bad]
    assert any(not line["passed"] for line in lines)

    (passed,) = actions(done.events, "validate_done")
    assert passed.detail["node"] == good and passed.detail["new_machine"] is True
    assert {c["check"] for c in passed.detail["checks"]} == {"inventory", "dcgm", "nccl"}
    assert passed.detail["inventory"]["gpu_count"] == 8

    assert bad not in watcher.schedulable, "the bad machine was never schedulable"
    assert engine.node(bad) is None
    final = engine.node(good)
    assert final is not None and not final["spec"].get("unschedulable")


def test_a_slow_nvlink_repair_fails_validation_and_goes_on_to_replacement(
    started: Callable[[str], Engine],
) -> None:
    engine = started(REPAIR)
    node = pool_node(engine.sim)
    engine.fault({"type": "nvlink_slow", "node": node, "fraction": 0.5})
    engine.push(xid(node, code=74))
    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)
    assert done.state is State.SUCCEEDED, (done.error, done.hold_reason)
    (failed,) = actions(done.events, "validate_failed")
    assert failed.to_state is State.REPLACING and failed.detail["escalated_to"] == "replace"
    assert "under the" in failed.detail["reason"] and H100 in failed.detail["reason"]
    moves = [e.to_state for e in done.events if e.to_state is not None]
    assert moves[-4:] == [State.REPLACING, State.VALIDATING, State.VERIFYING, State.SUCCEEDED]
    assert done.outcome == "replaced"
    wait_for(lambda: engine.node(node) is None, what=f"{node} to leave")


PAIR = (
    REPLACE
    + f"""        nccl_pair: true
        pair_busbw_floor: {{"{H100}": 330}}
"""
)


def test_the_two_node_check_pairs_with_a_validated_node_of_the_pool(
    started: Callable[[str], Engine],
) -> None:
    engine = started(PAIR)
    first, second = sorted(
        engine.sim.kubectl("get", "nodes", "-l", f"simcloud.io/nodepool={POOL}", "-o", "name")
        .replace("node/", "")
        .split()
    )[:2]
    engine.fault({"type": "xid", "node": first, "gpu": 0, "code": 79})
    engine.push(xid(first))
    done = engine.wait_state(first, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)
    assert done.state is State.SUCCEEDED, (done.error, done.hold_reason)
    (passed,) = actions(done.events, "validate_done")
    pair = next(c for c in passed.detail["checks"] if c["check"] == "nccl_pair")
    assert pair["skipped"] is True and pair["passed"] is False and pair["peer"] is None
    assert "no validated, schedulable node" in pair["reason"]
    assert "nccl_pair skipped" in passed.detail["result"]
    validated = done.new_node
    assert validated is not None

    engine.fault({"type": "xid", "node": second, "gpu": 0, "code": 79})
    engine.push(xid(second))
    again = engine.wait_state(second, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)
    assert again.state is State.SUCCEEDED, (again.error, again.hold_reason)
    (job,) = actions(again.events, "validation_started")
    assert job.detail["peer"] == validated
    assert any(p.startswith("mpirun ") and validated in p for p in job.detail["programs"])
    (line,) = [
        e.detail
        for e in actions(again.events, "validation_check")
        if e.detail["check"] == "nccl_pair"
    ]
    assert line["passed"] is True and line["peer"] == validated, line
    assert again.new_node is not None
    assert sorted(line["hosts"]) == sorted([again.new_node, validated])
    assert line["seconds"] is not None and line["seconds"] >= 0


def test_a_job_log_without_the_checks_sections_fails_every_check_with_its_tail(
    started: Callable[..., Engine], tmp_path: Path
) -> None:
    template = tmp_path / "job.yaml"
    template.write_text(
        DEFAULT_TEMPLATE.replace(
            "command: $command", 'command: ["sh", "-c", "echo cut; echo short"]'
        )
    )
    text = REPLACE.replace("dcgm_level_new: 2", "dcgm_level_new: 2\n        max_replacements: 0")
    engine = started(text, repair={"job_template": template})
    node = pool_node(engine.sim)
    engine.fault({"type": "xid", "node": node, "gpu": 0, "code": 79})
    engine.push(xid(node))
    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)
    assert done.state is State.HELD, (done.error, done.hold_reason)
    assert "failed validation after 1 replacement(s)" in (done.hold_reason or "")
    lines = {e.detail["check"]: e.detail for e in actions(done.events, "validation_check")}
    assert sorted(lines) == ["dcgm", "inventory", "nccl"]
    for line in lines.values():
        assert line["passed"] is False and "has no complete output" in line["reason"], line
        assert line["raw_tail"] == "cut\nshort\n" and line["seconds"] is None
    (failed,) = actions(done.events, "validate_failed")
    assert failed.detail["reason"] == lines["inventory"]["reason"]


# An operator's Job template that goes through the scheduler (nodeSelector, not nodeName) and
# tolerates only the fence: a pool taint it does not tolerate keeps its pod Pending.
SCHEDULED = DEFAULT_TEMPLATE.replace(
    "      nodeName: $node\n", "      nodeSelector:\n        kubernetes.io/hostname: $node\n"
).replace(
    "        - operator: Exists\n",
    "        - {key: node.kubernetes.io/unschedulable, operator: Exists}\n"
    "        - {key: remediator.io/quarantine, operator: Exists}\n",
)


def test_a_validation_job_the_node_cannot_schedule_holds_with_the_schedulers_reason(
    started: Callable[..., Engine], tmp_path: Path
) -> None:
    template = tmp_path / "job.yaml"
    template.write_text(SCHEDULED)
    engine = started(REPAIR, repair={"job_template": template})
    node = pool_node(engine.sim)
    engine.sim.kubectl("taint", "node", node, "dedicated=training:NoSchedule")
    engine.fault({"type": "nvlink_slow", "node": node, "fraction": 0.5})
    engine.push(xid(node, code=74))
    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)
    assert done.state is State.HELD, (done.error, done.hold_reason)
    reason = done.hold_reason or ""
    assert reason.startswith(f"validation Job cannot run on {node}: "), reason
    assert reason.endswith(
        "the Job does not tolerate the node's taint dedicated=training:NoSchedule"
    )
    (held,) = [e for e in done.events if e.to_state is State.HELD]
    assert "untolerated taint {dedicated: training}" in held.detail["unschedulable"], held.detail
    assert not actions(done.events, "validation_check"), "no check is judged on a Job never run"
    assert not actions(done.events, "validate_failed") and done.new_node is None
    fenced = engine.node(node)
    assert fenced is not None and fenced["spec"].get("unschedulable") is True


def test_a_validation_job_held_unschedulable_goes_on_once_the_node_lets_it_run(
    started: Callable[..., Engine], tmp_path: Path
) -> None:
    """#39 item 15: the hold of a Job the node could not run is looked at again every poll: its
    reason follows what still keeps the pod off, and once the pod runs the same Job is followed
    to its verdict (no second Job, no second `validation_started`), as if never held."""
    template = tmp_path / "job.yaml"
    template.write_text(SCHEDULED)
    engine = started(REPAIR, repair={"job_template": template})
    node = pool_node(engine.sim)
    engine.sim.kubectl("taint", "node", node, "dedicated=training:NoSchedule")
    engine.push(xid(node, code=74))
    held = engine.wait_state(node, State.SUCCEEDED, State.FAILED, State.HELD, timeout=300)
    assert held.state is State.HELD, (held.error, held.hold_reason)
    assert "taint dedicated=training:NoSchedule" in (held.hold_reason or "")

    engine.sim.kubectl("taint", "node", node, "lab=gpu:NoSchedule")
    wait_for(
        lambda: "lab=gpu:NoSchedule" in ((engine.of_node(node) or held).hold_reason or ""),
        60,
        "the hold's reason to name the second taint",
    )
    engine.sim.kubectl("taint", "node", node, "dedicated=training:NoSchedule-")
    engine.sim.kubectl("taint", "node", node, "lab=gpu:NoSchedule-")
    done = engine.wait_state(node, State.SUCCEEDED, State.FAILED, timeout=120)
    assert done.state is State.SUCCEEDED and done.outcome == "repaired", done.error

    resumed = actions(done.events, "validation_job_runs")
    assert [(e.from_state, e.to_state) for e in resumed] == [(State.HELD, State.VALIDATING)]
    (job,) = actions(done.events, "validation_started")
    (passed,) = actions(done.events, "validate_done")
    assert {c["check"] for c in passed.detail["checks"]} == {"inventory", "dcgm", "nccl"}
    listed = engine.sim.kubectl(
        "get", "jobs", "-A", "-l", f"remediator.io/remediation-id={done.id}", "-o", "name"
    ).split()
    assert listed == [f"job.batch/{job.detail['job']}"], listed

"""The whole signal chain with the shipped policies: a fault injected into the simulator → its
DCGM / node_exporter telemetry → a real Prometheus scraping it every second → PrometheusSource
(and the node-condition source over KubeClient) → SignalFolder → evaluate, state carried across
cycles → the expected decision on the right node and GPU, and nothing anywhere else.

A case's later faults wait on the chain, not on the wall clock: each goes in a set time after
the chain saw the one before. Injected on a timetable, a loaded machine made two NVLink bursts
land in one fold window (two events counted as one) and XID 74 on three GPUs reach one cycle
together (one decision where the policies make two in sequence).

Time is compressed, logic is not: the policies are the files in policies/, loaded from a temp
copy whose `threshold.for` and `burst.within` durations are divided by SCALE (every other field
is checked to be identical), and the source's look-back windows and the fold windows are
shortened in the same spirit. Every fault gets its own node, all run at once on one simulator.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from remediator.kube.client import KubeClient
from remediator.policy.durations import format_duration, parse_duration
from remediator.policy.evaluate import Decision, EvalState, History, PastRemediation, evaluate
from remediator.policy.interest import interest_of
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.signals.dedup import SignalFolder
from remediator.signals.model import Signal, SignalKind
from remediator.signals.sources.base import Source
from remediator.signals.sources.node_conditions import NodeConditionSource
from remediator.signals.sources.prometheus import (
    PrometheusQueries,
    PrometheusSource,
    PrometheusSourceConfig,
)
from remediator.sim.node.hardware import gpu_uuid
from tests.fixtures.prometheus import PrometheusHandle, free_port, scrape_config
from tests.fixtures.sim import SimHandle, start_sim

pytestmark = pytest.mark.integration

POLICIES = Path(__file__).resolve().parents[2] / "policies"
NODES, GPUS = 24, 4
SCALE = 20  # 2m for: → 6s, 10m within: → 30s
FOLD = timedelta(seconds=10)  # production 5m; a third of the scaled burst window, on purpose
COUNTERS = "6s"  # counter look-back = NVLink fold window (production 2m)
# ECC's look-back = its fold window: a DBE's increase stays in view for several cycles even when
# a loaded machine stretches one past 6 s (the new-error signal was missed so); nothing here
# counts ECC events, so the longer window changes no decision.
ECC_WINDOW = "30s"
CYCLE_SECONDS = 0.5
HEALTHY_CYCLES = 30
MIN_FAULT_PHASE = 42.0  # long enough for every "never" below: 4 fold windows, 30s for:
MAX_FAULT_PHASE = 150.0  # a bound for a loaded machine, never a wait
HOT = 78.0
NVLINK_BURST = {"type": "nvlink_errors", "gpu": 1, "count": 40}
BURST_GAP = parse_duration(COUNTERS).total_seconds() + 1.5  # past the fold window, and a cycle


def scaled(text: str) -> str:
    return format_duration(parse_duration(text) / SCALE)


def scaled_policy_copy(target: Path) -> PolicySet:
    """policies/ with every `for:` and burst `within:` divided by SCALE; nothing else changes."""
    target.mkdir()
    for path in sorted(POLICIES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for policy in data.get("policies", []) if path.name != "settings.yaml" else []:
            match = policy["match"]
            threshold, burst = match.get("threshold") or {}, match.get("burst") or {}
            if "for" in threshold:
                threshold["for"] = scaled(threshold["for"])
            if "within" in burst:
                burst["within"] = scaled(burst["within"])
        (target / path.name).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    shipped, fast = load_policy_dir(POLICIES), load_policy_dir(target)
    assert shipped.settings == fast.settings
    assert [p.name for p in shipped.policies] == [p.name for p in fast.policies]
    for original, short in zip(shipped.policies, fast.policies, strict=True):
        rest = {"match": {"threshold": {"for_"}, "burst": {"within"}}}
        assert original.model_dump(exclude=rest) == short.model_dump(exclude=rest), original.name
    return fast


@dataclass
class Env:
    sim: SimHandle
    prometheus: PrometheusHandle
    kube: KubeClient
    nodes: list[str]
    policies: PolicySet

    def inject(self, **fault: Any) -> None:
        response = httpx.post(f"{self.sim.inject_url}/v1/faults", json=fault, timeout=10.0)
        assert response.status_code == 200, response.text

    def prometheus_source(self) -> PrometheusSource:
        """Narrowed to what the policies act on, as the controller runs it."""
        queries = PrometheusQueries.with_windows(
            counters=COUNTERS, missing="15s", symbol_errors="3m"
        )
        ecc = PrometheusQueries.with_windows(
            counters=ECC_WINDOW, missing="15s", symbol_errors="3m"
        ).ecc
        queries = queries.model_copy(update={"ecc": ecc})
        config = PrometheusSourceConfig(
            url=self.prometheus.url,
            queries=queries,
            staleness_seconds=20,
            freshness={
                "dcgm": "time() - max(timestamp(DCGM_FI_DEV_GPU_TEMP))",
                "infiniband": "time() - max(timestamp(node_infiniband_state_id))",
            },
        )
        return PrometheusSource(config, interest=interest_of(self.policies.policies))


def start_prometheus(workdir: Path, targets: list[str]) -> PrometheusHandle:
    handle = PrometheusHandle(workdir, scrape_config(targets, "1s", "telemetry"))
    for _ in range(2):
        try:
            handle.start()
            return handle
        except RuntimeError:
            handle.use_port(free_port())  # the free port was taken in between
    handle.start()
    return handle


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    if shutil.which("/usr/bin/prometheus") is None:
        pytest.skip("/usr/bin/prometheus is not installed")
    policies = scaled_policy_copy(tmp_path_factory.mktemp("chain") / "policies")
    sim = start_sim(tmp_path_factory.mktemp("sim"), nodes=NODES, gpus_per_node=GPUS)
    prometheus = start_prometheus(
        tmp_path_factory.mktemp("prometheus"), [f"{sim.metrics_url}/metrics"]
    )
    kube = KubeClient.from_kubeconfig(sim.kubeconfig, timeout=10.0)
    try:
        prometheus.wait_for(f"count(DCGM_FI_DEV_GPU_TEMP) == {NODES * GPUS}")
        prometheus.wait_for(f"count(node_infiniband_state_id) == {NODES * GPUS}")
        nodes = sorted(n.name for n in kube.list_nodes())
        assert len(nodes) == NODES
        yield Env(sim, prometheus, kube, nodes, policies)
    finally:
        kube.close()
        prometheus.stop()
        sim.stop()


@dataclass
class Chain:
    """What the controller's intake does with the sources' signals, minus the store and budgets:
    fold, evaluate with the carried state, and remember what it decided (a disruptive decision
    opens the node, every decision is a past remediation for cooldowns and repeats)."""

    sources: list[Source]
    policies: PolicySet
    folder: SignalFolder = field(
        default_factory=lambda: SignalFolder(
            FOLD,
            windows={
                SignalKind.NVLINK: parse_duration(COUNTERS),
                SignalKind.ECC: parse_duration(ECC_WINDOW),
            },
        )
    )
    state: EvalState = field(default_factory=EvalState)
    open: dict[str, str] = field(default_factory=dict)
    past: list[PastRemediation] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    fresh: list[Signal] = field(default_factory=list)
    readings: dict[str, list[float]] = field(default_factory=dict)  # node → °C seen
    seen: dict[str, list[tuple[float, int | None]]] = field(
        default_factory=dict
    )  # node → (when, GPU)

    def cycle(self) -> list[Decision]:
        now = datetime.now(UTC)
        arrived = time.monotonic()
        signals: list[Signal] = []
        for source in self.sources:
            result = source.poll(now)
            assert result.health.up, f"{result.health.name}: {result.health.error}"
            signals.extend(result.signals)
        fresh = self.folder.fold(signals, now)
        history = History.build(remediations=self.past, open=self.open, state=self.state)
        evaluation = evaluate(fresh, history, self.policies.policies, now, self.policies.settings)
        self.state = evaluation.state
        for decision in evaluation.decisions:
            if decision.disruptive:
                self.open[decision.node] = decision.policy
            self.past.append(PastRemediation(decision.node, decision.policy, now, "started"))
        self.decisions.extend(evaluation.decisions)
        self.fresh.extend(s for s in fresh if s.kind is not SignalKind.THERMAL)
        for s in fresh:
            if s.kind is SignalKind.THERMAL and s.value is not None:
                self.readings.setdefault(s.node, []).append(s.value)
            if s.kind is not SignalKind.THERMAL or (s.value or 0.0) >= HOT:
                self.seen.setdefault(s.node, []).append((arrived, s.gpu))
        return list(evaluation.decisions)

    def decided(self, node: str) -> list[str]:
        return [d.policy for d in self.decisions if d.node == node]


def make_chain(env: Env) -> Chain:
    return Chain([env.prometheus_source(), NodeConditionSource(env.kube)], env.policies)


@dataclass(frozen=True)
class Case:
    """Faults on one node, and the decisions expected there in order (empty: none, ever). Each
    fault's seconds count from the moment the chain saw a signal of the fault before it on that
    node (a hot reading, for a temperature); the first fault's from the phase start. `gpus`: the
    GPUs the deciding signals must name."""

    name: str
    faults: tuple[tuple[float, dict[str, Any]], ...]
    expect: tuple[str, ...]
    gpus: frozenset[int] = frozenset()
    past: tuple[str, ...] = ()  # policies that remediated this node's `gpus` a day ago


def xid(gpu: int, code: int, at: float = 0.0) -> tuple[float, dict[str, Any]]:
    return at, {"type": "xid", "gpu": gpu, "code": code}


CASES = (
    Case("xid 79", (xid(1, 79),), ("xid-79-fallen-off-bus",), frozenset({1})),
    Case(
        "gpu missing", ((0, {"type": "gpu_missing", "gpu": 2}),), ("gpu-missing",), frozenset({2})
    ),
    Case("xid 48", (xid(3, 48),), ("xid-48-double-bit-ecc",), frozenset({3})),
    # The contained error leaves its remapped row pending a reset: announced as maintenance.
    Case(
        "xid 94",
        (xid(0, 94),),
        ("xid-94-contained-memory", "row-remap-pending"),
        frozenset({0}),
    ),
    Case("xid 95", (xid(2, 95),), ("xid-64-95-reset",), frozenset({2})),
    Case(
        "xid 95 again",
        (xid(1, 95),),
        ("xid-64-95-repeated",),
        frozenset({1}),
        past=("xid-64-95-reset",),
    ),
    Case("xid 64", (xid(3, 64),), ("xid-64-95-reset",), frozenset({3})),
    Case("xid 13", (xid(0, 13),), ("xid-application-faults",), frozenset({0})),
    Case("xid 31", (xid(1, 31),), ("xid-application-faults",), frozenset({1})),
    Case("xid 43", (xid(2, 43),), ("xid-application-faults",), frozenset({2})),
    Case("one xid 74, held by the gauge", (xid(0, 74),), ("xid-74-nvlink",), frozenset({0})),
    Case(
        "xid 74 on three GPUs",
        (xid(0, 74), xid(1, 74, 2), xid(2, 74, 2)),
        ("xid-74-nvlink", "xid-74-nvlink-repeated"),
        frozenset({2}),  # the one that completed the burst
    ),
    # A burst is one event for a fold window after the chain took it: the next comes after.
    Case(
        "three nvlink bursts",
        tuple(
            (t, {"type": "nvlink_errors", "gpu": 1, "count": 40}) for t in (0, BURST_GAP, BURST_GAP)
        ),
        ("nvlink-error-bursts",),
        frozenset({1}),
    ),
    Case(
        "two nvlink bursts",
        tuple((t, NVLINK_BURST) for t in (0, BURST_GAP)),
        (),
    ),
    Case("ib link down", ((0, {"type": "ib_link_down", "device": "mlx5_1"}),), ("ib-link-down",)),
    Case(
        "ib symbol errors",
        ((0, {"type": "ib_symbol_errors", "device": "mlx5_0", "count": 500}),),
        ("ib-symbol-errors",),
    ),
    Case(
        "hot",
        ((0, {"type": "temperature", "gpu": 2, "celsius": 84, "rate": 50}),),
        ("gpu-overheat",),
        frozenset({2}),
    ),
    Case(
        "hot for a shorter spell",
        (
            (0, {"type": "temperature", "gpu": 1, "celsius": 84, "rate": 50}),
            (0, {"type": "temperature", "gpu": 1, "celsius": 50, "rate": 50}),
        ),
        (),
    ),
    # Held just under the line: with the simulator's ±2.8 °C drift the readings stay 72-77 °C.
    Case("warm, never 78", ((0, {"type": "temperature", "celsius": 74.2, "rate": 50}),), ()),
    Case(
        "not ready",
        ((0, {"type": "condition", "condition": "Ready", "status": "False"}),),
        ("node-not-ready",),
    ),
    Case(
        "npd xid condition",
        ((0, {"type": "condition", "condition": "GpuXidError", "status": "True"}),),
        ("npd-gpu-xid-error",),
    ),
)


def test_a_healthy_fleet_decides_nothing(env: Env) -> None:
    chain = make_chain(env)
    for _ in range(HEALTHY_CYCLES):
        assert chain.cycle() == [], chain.decisions
        time.sleep(CYCLE_SECONDS)
    assert chain.fresh == []  # not one event signal
    # Only GPUs at or above gpu-overheat's clear level (75 °C) within the look-back come back;
    # a healthy fleet has few or none of them, and none hot.
    seen = [value for values in chain.readings.values() for value in values]
    assert all(value < HOT for value in seen), seen


def test_every_default_policy_family_decides_on_the_right_node_and_gpu(env: Env) -> None:
    assert len(CASES) < NODES
    chain = make_chain(env)
    node_of = {case.name: env.nodes[i] for i, case in enumerate(CASES)}
    bystanders = env.nodes[len(CASES) :]
    day_ago = datetime.now(UTC) - timedelta(days=1)
    # The shipped repeat rules count by GPU (#28): the past remediation names the same GPUs, by
    # the UUIDs the simulator gives the node's original hardware.
    chain.past += [
        PastRemediation(
            node_of[c.name],
            policy,
            day_ago,
            "succeeded",
            gpus=frozenset(gpu_uuid(node_of[c.name], g) for g in c.gpus),
        )
        for c in CASES
        for policy in c.past
    ]
    pending = {c.name: list(c.faults) for c in CASES}
    due = dict.fromkeys(node_of, 0.0)  # when a case's next fault may go, from the phase start
    awaited: dict[str, tuple[int, int | None]] = {}  # case → (signals seen then, GPU) of the last

    def inject_due(elapsed: float) -> None:
        for name, faults in pending.items():
            node = node_of[name]
            if name in awaited:
                mark, gpu = awaited[name]
                came = [t for t, g in chain.seen.get(node, [])[mark:] if gpu is None or g == gpu]
                if not came:
                    continue  # the fault before is not in the chain yet
                del awaited[name]
                due[name] = came[0] - start + faults[0][0]
            if faults and elapsed >= due[name]:
                fault = faults.pop(0)[1]
                env.inject(node=node, **fault)
                if faults:
                    awaited[name] = (len(chain.seen.get(node, [])), fault.get("gpu"))

    def finished() -> bool:
        return not any(pending.values()) and all(
            len(chain.decided(node_of[c.name])) >= len(c.expect) for c in CASES
        )

    start = time.monotonic()
    while True:
        elapsed = time.monotonic() - start
        inject_due(elapsed)
        chain.cycle()
        if (elapsed >= MIN_FAULT_PHASE and finished()) or elapsed > MAX_FAULT_PHASE:
            break
        time.sleep(CYCLE_SECONDS)

    assert not any(pending.values()), f"faults never injected (the one before unseen): {pending}"
    got = {c.name: chain.decided(node_of[c.name]) for c in CASES}
    assert got == {c.name: list(c.expect) for c in CASES}
    assert [d for d in chain.decisions if d.node in bystanders] == []
    for case in CASES:
        if case.gpus:
            final = [d for d in chain.decisions if d.node == node_of[case.name]][-1]
            assert {s.gpu for s in final.signals} == case.gpus, (case.name, final.signals)

    decision = {d.policy: d for d in chain.decisions}
    assert not decision["xid-application-faults"].disruptive
    assert decision["npd-gpu-xid-error"].approval == "required"
    assert "3 events within 30s" in decision["nvlink-error-bursts"].reason
    assert "3 events within 30s" in decision["xid-74-nvlink-repeated"].reason
    overheat = decision["gpu-overheat"].reason
    assert "(≥ 78 for" in overheat, overheat
    symbols = decision["ib-symbol-errors"].signals[0]
    assert (symbols.labels["problem"], symbols.labels["device"]) == ("symbol_errors", "mlx5_0")
    assert decision["ib-link-down"].signals[0].labels["device"] == "mlx5_1"
    # The DBE that came with XID 48 reached the chain as a new error (code 1) on its GPU, and
    # the counter policy alone would have replaced the node: the XID only named the decision.
    dbe = [s for s in chain.fresh if s.node == node_of["xid 48"] and s.kind is SignalKind.ECC]
    assert {(s.gpu, s.code) for s in dbe} >= {(3, 1), (3, 2)}
    ecc_only = [p for p in env.policies.policies if p.name == "ecc-double-bit"]
    now = datetime.now(UTC)
    alone = evaluate(dbe, History(), ecc_only, now, env.policies.settings).decisions
    assert [(d.node, d.policy) for d in alone] == [(node_of["xid 48"], "ecc-double-bit")]
    # The negatives really were near their lines.
    assert max(chain.readings[node_of["hot for a shorter spell"]]) >= HOT
    # Narrowed: the warm node's GPUs came back once at or above 75 °C (gpu-overheat's clear
    # level), and stayed in the answer for the look-back; none reached the trigger.
    warm = chain.readings.get(node_of["warm, never 78"], [])
    assert warm and 75 <= max(warm) < HOT, warm

    # Repaired: every fault cleared and every remediation closed. Lifetime counts (aggregate
    # DBEs, the symbol errors still inside their window) keep being reported; none may act.
    for node in node_of.values():
        env.inject(type="clear", node=node)
    # Repaired once Prometheus has scraped since: until then its answers still show the faults
    # (a row remap pending was decided again so at load 16), and an open remediation would hold
    # them, as it does here until then.
    cleared = time.time()
    env.prometheus.wait_for(f"min(timestamp(up)) > {cleared:.3f}", timeout=120)
    chain.open.clear()
    before = len(chain.decisions)
    deadline = time.monotonic() + 2.5 * FOLD.total_seconds()
    while time.monotonic() < deadline:
        chain.cycle()
        time.sleep(CYCLE_SECONDS)
    assert chain.decisions[before:] == []

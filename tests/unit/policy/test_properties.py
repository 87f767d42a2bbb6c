"""Properties that must hold for any input: determinism, one decision per node, budgets kept."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from remediator.policy.budget import BreakerState, ClusterState, admit, limit_for
from remediator.policy.evaluate import EvalState, History, evaluate
from remediator.policy.schema import GlobalSettings
from remediator.signals.model import Signal, SignalKind
from tests.unit.policy.builders import T0, at, decision, policy, signal

POLICIES = [
    policy(
        "hot",
        {"kind": "thermal", "threshold": {"above": 78, "clear": 75, "for": "1m"}},
        priority=60,
    ),
    policy("xid-fatal", {"kind": "xid", "codes": [79, 48]}, priority=100),
    policy("xid-any", {"kind": "xid"}, priority=10, actions=[{"action": "notify"}]),
    policy("nvl", {"kind": "nvlink", "burst": {"count": 2, "within": "5m"}}, priority=70),
    policy("train-ib", {"kind": "infiniband"}, nodes={"pools": ["train"]}, priority=80),
]
NODES = [f"n{i}" for i in range(6)]
POOLS = {n: ("train" if i % 2 else "infer") for i, n in enumerate(NODES)}

signals_st = st.builds(
    signal,
    node=st.sampled_from(NODES),
    kind=st.sampled_from(
        [SignalKind.THERMAL, SignalKind.XID, SignalKind.NVLINK, SignalKind.INFINIBAND]
    ),
    at=st.integers(min_value=0, max_value=600),
    gpu=st.integers(min_value=0, max_value=3),
    code=st.sampled_from([13, 48, 79]),
    value=st.floats(min_value=60, max_value=90),
)
cycles_st = st.lists(st.lists(signals_st, max_size=20), min_size=1, max_size=6)
open_st = st.dictionaries(st.sampled_from(NODES), st.just("hot"), max_size=3)


def run_cycles(
    cycles: list[list[Signal]], open_nodes: dict[str, str]
) -> list[list[tuple[str, str]]]:
    state = EvalState()
    out = []
    for index, batch in enumerate(cycles):
        now = at(600 * index + 600)
        shifted = [s.at(s.observed_at + (now - at(600))) for s in batch]
        history = History.build(open=open_nodes, pools=POOLS, state=state)
        result = evaluate(shifted, history, POLICIES, now, GlobalSettings())
        state = result.state
        out.append([(d.node, d.policy) for d in result.decisions])
    return out


@settings(max_examples=150, deadline=None)
@given(cycles_st, open_st)
def test_evaluation_is_deterministic(
    cycles: list[list[Signal]], open_nodes: dict[str, str]
) -> None:
    assert run_cycles(cycles, open_nodes) == run_cycles(cycles, open_nodes)


@settings(max_examples=150, deadline=None)
@given(cycles_st, open_st)
def test_never_decides_a_node_twice_nor_an_open_one(
    cycles: list[list[Signal]], open_nodes: dict[str, str]
) -> None:
    for decided in run_cycles(cycles, open_nodes):
        counts = Counter(node for node, _ in decided)
        assert all(c == 1 for c in counts.values())
        assert not set(counts) & set(open_nodes)


@settings(max_examples=200, deadline=None)
@given(
    decided=st.lists(
        st.tuples(st.sampled_from(NODES), st.integers(0, 100), st.booleans()), max_size=12
    ),
    unhealthy=st.sets(st.sampled_from(NODES), max_size=4),
    open_count=st.integers(0, 6),
    pool_pct=st.floats(0, 100),
    cluster_count=st.integers(0, 6),
    concurrent=st.integers(0, 6),
    breaker_max=st.integers(1, 8),
)
def test_budgets_never_admit_beyond_their_limits(
    decided: list[tuple[str, int, bool]],
    unhealthy: set[str],
    open_count: int,
    pool_pct: float,
    cluster_count: int,
    concurrent: int,
    breaker_max: int,
) -> None:
    by_node = {
        node: decision(node, POOLS[node], prio, disruptive) for node, prio, disruptive in decided
    }
    config = GlobalSettings.model_validate(
        {
            "max_unhealthy": {
                "per_pool": {"percent": pool_pct},
                "cluster": {"count": cluster_count},
            },
            "max_concurrent": concurrent,
            "storm_breaker": {"max_new_faults": breaker_max},
        }
    )
    per_pool = Counter(POOLS.values())
    unhealthy_by_pool: dict[str, frozenset[str]] = {}
    for node in unhealthy:
        unhealthy_by_pool[POOLS[node]] = unhealthy_by_pool.get(POOLS[node], frozenset()) | {node}
    cluster = ClusterState(dict(per_pool), unhealthy_by_pool, open_count)
    result = admit(by_node.values(), cluster, config, BreakerState(), T0)

    assert len(result.admitted) + len(result.held) == len(by_node)
    if result.breaker.tripped:
        assert result.admitted == ()
        return
    disruptive = [d for d in result.admitted if d.disruptive]
    assert open_count + len(disruptive) <= max(open_count, concurrent)
    after = unhealthy | {d.node for d in disruptive}
    if disruptive:
        cap = limit_for(config.max_unhealthy.cluster, len(NODES))
        assert cap is not None and len(after) <= max(cap, len(unhealthy))
        for pool, total in per_pool.items():
            in_pool = {n for n in after if POOLS[n] == pool}
            before = {n for n in unhealthy if POOLS[n] == pool}
            pool_cap = limit_for(config.max_unhealthy.per_pool, total)
            assert pool_cap is not None and len(in_pool) <= max(pool_cap, len(before))
    keys = [(-d.priority, d.node) for d in result.admitted]
    assert keys == sorted(keys)

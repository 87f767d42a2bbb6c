"""Policy evaluation at fleet scale: 10,000 nodes x 8 GPUs of thermal readings plus a few faults,
against the shipped policies. Target: under 1 s of CPU and under 300 MB resident per cycle.

Method: build the signals once, then time `evaluate` (CPU time, median of several runs) on a first
cycle (empty state) and a next cycle (state carried over, 1% of GPUs hot), and compare with a bare
loop that only touches each signal, as a ratio within the same run. Peak RSS is the process's
maximum resident size after all runs, signals included.

The hardware ledger (#28, target < 10% of the intake's CPU): the next cycle again, its readings
carrying their GPU's UUID and PCI address as DCGM's do, with and without `Ledger.resolve` (on a
migrated SQLite, its picture of the fleet warm from a first cycle) before `evaluate`.
"""

from __future__ import annotations

import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from remediator.ledger.store import Ledger
from remediator.policy.budget import BreakerState, ClusterState, admit
from remediator.policy.evaluate import History, evaluate
from remediator.policy.loader import load_policy_dir
from remediator.signals.model import Signal, SignalKind
from remediator.store import db

NODES = 10_000
GPUS = 8
RUNS = 7
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def fleet_signals(at: datetime) -> list[Signal]:
    signals = []
    for n in range(NODES):
        node = f"gpu-node-{n:05d}"
        for gpu in range(GPUS):
            hot = (n * GPUS + gpu) % 100 == 0
            signals.append(
                Signal(
                    node=node,
                    kind=SignalKind.THERMAL,
                    source="bench",
                    observed_at=at,
                    gpu=gpu,
                    value=80.0 if hot else 60.0 + (n + gpu) % 15,
                )
            )
    for n, code in ((7, 79), (1234, 48), (4321, 13), (9999, 74)):
        node = f"gpu-node-{n:05d}"
        signals.append(
            Signal(node=node, kind=SignalKind.XID, source="bench", observed_at=at, gpu=0, code=code)
        )
    return signals


def with_identity(signals: list[Signal]) -> list[Signal]:
    """The same signals as DCGM's exporter labels them: the GPU's UUID and PCI address."""
    return [
        s.model_copy(
            update={
                "gpu_uuid": f"GPU-{s.node[-5:]}-{s.gpu}",
                "labels": {"pci_bus_id": f"00000000:{0x18 + (s.gpu or 0):02X}:00.0"},
            }
        )
        if s.gpu is not None
        else s
        for s in signals
    ]


def warm_ledger(directory: str, signals: list[Signal]) -> Ledger:
    """A ledger on a migrated SQLite that has seen these signals once (every placement known)."""
    url = f"sqlite:///{directory}/ledger.db"
    db.upgrade(url)
    ledger = Ledger(db.make_session_factory(db.make_engine(url)), "bench")
    ledger.resolve(signals)
    return ledger


def cpu_median(work: Callable[[], object]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.process_time()
        work()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    policy_set = load_policy_dir(Path(__file__).resolve().parent.parent / "policies")
    policies, settings = policy_set.policies, policy_set.settings
    pools = {f"gpu-node-{n:05d}": f"pool-{n % 20}" for n in range(NODES)}
    first = fleet_signals(T0)
    second = [s.at(T0 + timedelta(seconds=30)) for s in first]
    history = History.build(pools=pools)
    warm = evaluate(first, history, policies, T0, settings).state
    carried = History.build(pools=pools, state=warm)
    cluster = ClusterState(nodes_per_pool={f"pool-{i}": NODES // 20 for i in range(20)})

    def bare() -> None:
        total = 0.0
        for signal in first:
            if signal.value is not None:
                total += signal.value

    def cycle_first() -> None:
        evaluate(first, history, policies, T0, settings)

    def cycle_next() -> None:
        now = T0 + timedelta(seconds=30)
        result = evaluate(second, carried, policies, now, settings)
        admit(result.decisions, cluster, settings, BreakerState(), now)

    identified = with_identity(second)
    scratch = tempfile.TemporaryDirectory()
    ledger = warm_ledger(scratch.name, identified)

    def cycle_identified() -> None:
        now = T0 + timedelta(seconds=30)
        result = evaluate(identified, carried, policies, now, settings)
        admit(result.decisions, cluster, settings, BreakerState(), now)

    def cycle_linked() -> None:
        now = T0 + timedelta(seconds=30)
        result = evaluate(ledger.resolve(identified), carried, policies, now, settings)
        admit(result.decisions, cluster, settings, BreakerState(), now)

    baseline = cpu_median(bare)
    without = cpu_median(cycle_identified)
    linked = cpu_median(cycle_linked)
    scratch.cleanup()
    rows = [
        ("bare loop over signals", baseline),
        ("evaluate, first cycle", cpu_median(cycle_first)),
        ("evaluate + admit, next cycle", cpu_median(cycle_next)),
        ("next cycle, UUID signals", without),
        ("next cycle, UUID signals + ledger", linked),
    ]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{len(first):,} signals ({NODES:,} nodes x {GPUS} GPUs + 4 faults), "
        f"{len(policies)} policies, {len(warm.streaks):,} running streaks; median of {RUNS}"
    )
    print(f"{'case':<32}{'CPU s':>10}{'x bare':>10}")
    for name, seconds in rows:
        print(f"{name:<32}{seconds:>10.3f}{seconds / baseline:>10.1f}")
    print(f"peak RSS {peak_mb:.0f} MB (signals included)")
    print(f"hardware ledger linking adds {100 * (linked / without - 1):.1f}% to the cycle's CPU")


if __name__ == "__main__":
    main()

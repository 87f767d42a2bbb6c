"""`python -m bench soak`: the chaos soak of issue #38.

The real controller (an HA pair of `remediator run` with leader election, on PostgreSQL by
default) runs against the simulator with a real Slurm while a seeded schedule injects every
fault this setup can (bench/soak/schedule.py), and an independent checker asserts the
invariants of docs/safety.md from outside (bench/soak/checker.py). Each violation is printed the
moment it is found; the run ends with a table and the line

    soak: F faults, R remediations, V invariant violations (seed S, M min)

Exit 0: no violation and the soak went as modelled; 1: a violation; 2: bad arguments (nothing
started); 3: no violation, but the soak did not take the path it models (no remediation opened,
a kind of fault never took effect, a controller died by itself, a process left behind) or could
not be set up.

Usage: python -m bench soak --minutes M --seed S [--db sqlite|postgresql] [--faults K,K,...]
       python -m bench soak --seed S --minutes M --plan    (print the schedule only)
"""

from __future__ import annotations

import argparse
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from bench.soak.checker import GRACE, I6_BOUND, TOUCHED_GRACE, Checker
from bench.soak.faults import FaultRunner
from bench.soak.journal import RECOVERY_SECONDS, Journal
from bench.soak.schedule import (
    DESCRIPTIONS,
    UNAVAILABLE,
    Planned,
    UsageError,
    digest,
    draw,
    parse_kinds,
)
from bench.soak.stack import Stack

SHOWN = 8  # schedule lines printed
OVERRUN = 300.0  # seconds past the end the last faults may take to finish, at most
EXIT_VIOLATION, EXIT_USAGE, EXIT_PATH = 1, 2, 3


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench soak", description="the chaos soak")
    parser.add_argument("--minutes", type=float, default=10.0, help="how long (default 10)")
    parser.add_argument("--seed", type=int, default=1, help="the schedule's seed (default 1)")
    parser.add_argument("--db", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument(
        "--faults", help="comma-separated fault kinds (default: every kind the database allows)"
    )
    parser.add_argument("--nodes", type=int, default=16, help="simulated nodes (default 16)")
    parser.add_argument("--workdir", type=Path, help="where logs and data go (default: a new "
                        "temporary directory, removed after a clean run)")  # fmt: skip
    parser.add_argument("--plan", action="store_true", help="print the schedule and exit")
    return parser.parse_args(argv)


class Soak:
    def __init__(self, args: argparse.Namespace, kinds: tuple[str, ...]) -> None:
        self.args = args
        self.kinds = kinds
        self.schedule = draw(args.seed, args.minutes, kinds)
        self.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="soak-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.journal = Journal(args.seed)
        self.faults_stop = threading.Event()
        self.checker_stop = threading.Event()
        self.interrupted = False

    def say(self, text: str) -> None:
        elapsed = int(time.monotonic() - self.journal.started)
        print(f"[{elapsed // 60:02d}:{elapsed % 60:02d}] {text}", flush=True)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.say(f"{signal.Signals(signum).name}: stopping…")
        self.interrupted = True
        self.faults_stop.set()
        self.checker_stop.set()

    def run(self) -> int:
        args = self.args
        print(
            f"soak: seed {args.seed}, {args.minutes:g} min, {args.db}, {args.nodes} nodes, "
            f"faults: {', '.join(self.kinds)}"
        )
        print(f"soak: schedule {digest(self.schedule)}, {len(self.schedule)} faults; the first:")
        for planned in self.schedule[:SHOWN]:
            print(f"  {planned.line()}")
        print(f"soak: data and logs in {self.workdir}", flush=True)
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        stack = Stack(self.workdir, args.db, args.nodes)
        runner: FaultRunner | None = None
        checker: Checker | None = None
        left = []
        try:
            stack.start(self.say)
            self.journal.started = time.monotonic()
            self.say("the controllers serve; the soak starts")
            end = self.journal.started + args.minutes * 60.0
            runner = FaultRunner(
                stack, self.journal, self.schedule, self.faults_stop, self.say, end
            )
            checker = Checker(stack, self.journal, self.checker_stop)
            threads = [
                threading.Thread(target=checker.run, name="checker", daemon=True),
                threading.Thread(target=runner.run, name="faults", daemon=True),
            ]
            for thread in threads:
                thread.start()
            self.watch(runner, end)
            self.settle()
            runner.confirm_all()
            checker.check_overlaps()
            self.checker_stop.set()
            self.faults_stop.set()
            for thread in threads:
                thread.join(timeout=60)
        except Exception as exc:  # set-up or a part died: say what, stop everything
            traceback.print_exc()
            self.journal.error(f"the soak could not go on: {exc!r}")
        finally:
            self.faults_stop.set()
            self.checker_stop.set()
            if runner is not None:
                runner.join(timeout=60)
                runner.close()
            self.say("stopping everything…")
            left = stack.close(self.say)
            if checker is not None:
                checker.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        code = self.report(runner, checker, left)
        if code == 0 and args.workdir is None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return code

    def watch(self, runner: FaultRunner, end: float) -> None:
        """Until the soak's minutes are up and every fault has played out (bounded)."""
        while not self.faults_stop.wait(1.0):
            runner.watch_replicas()
            now = time.monotonic()
            scheduled = len(runner.fired) == len(self.schedule)
            if now >= end and scheduled and all(f.done.is_set() for f in runner.fired):
                return
            if now >= end + OVERRUN:
                busy = [f.planned.kind for f in runner.fired if not f.done.is_set()]
                self.journal.error(f"faults still running {OVERRUN:.0f}s past the end: {busy}")
                return

    def settle(self) -> None:
        """The signals planted last get their bound to show a disposition (I6), no longer."""
        deadline = time.monotonic() + I6_BOUND + RECOVERY_SECONDS
        while time.monotonic() < deadline and not self.interrupted:
            with self.journal.lock:
                waiting = [p for p in self.journal.planted if p.resolved is None]
            if not waiting:
                return
            time.sleep(1.0)

    # -- the report ------------------------------------------------------------------------

    def report(
        self, runner: FaultRunner | None, checker: Checker | None, left: Sequence[object]
    ) -> int:
        journal = self.journal
        fired = runner.fired if runner else []
        print("\nfaults by kind")
        print(f"  {'kind':<20} {'drawn':>5} {'fired':>5} {'took effect':>11}  last note")
        drawn = Counter(p.kind for p in self.schedule)
        took: Counter[str] = Counter()
        notes: dict[str, str] = {}
        for f in fired:
            if f.outcome is not None:
                took[f.planned.kind] += int(f.outcome.took_effect)
                notes[f.planned.kind] = f.outcome.note
        fired_kinds = Counter(f.planned.kind for f in fired)
        for kind in self.kinds:
            print(
                f"  {kind:<20} {drawn[kind]:>5} {fired_kinds[kind]:>5} {took[kind]:>11}  "
                f"{notes.get(kind, DESCRIPTIONS[kind])[:90]}"
            )
        for kind, why in UNAVAILABLE.items():
            print(f"  {kind:<20} {'-':>5} {'-':>5} {'-':>11}  not injectable here: {why[:70]}…")

        states = Counter(r["state"] for r in checker.listed) if checker else Counter[str]()
        remediations = sum(states.values())
        print("\nremediations by final state")
        for state, count in sorted(states.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {state:<20} {count:>5}")

        by_invariant = Counter(v.invariant for v in journal.violations)
        print("\nchecks made")
        print(f"  {'invariant':<10} {'checks':>8} {'violations':>10}")
        for invariant in ("I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8"):
            print(f"  {invariant:<10} {journal.checks[invariant]:>8} {by_invariant[invariant]:>10}")
        print(
            f"  graces: a required fence may be missing {GRACE:.0f}s, {TOUCHED_GRACE:.0f}s after a "
            f"human uncordon or slurmctld -c; a signal's disposition is due within "
            f"{I6_BOUND:.0f}s; time the controllers could not act (+{RECOVERY_SECONDS:.0f}s) "
            "does not count"
        )
        if journal.checks["I3"]:
            times = journal.reasserted
            gone = journal.checks["I3"] - len(times) - journal.not_due
            back = (
                f"re-asserted {len(times)} time(s) after median {statistics.median(times):.1f}s, "
                f"max {max(times):.1f}s"
                if times
                else "never re-asserted"
            )
            print(
                f"  I3: fences a human took off {back}"
                + (f"; {gone} node(s) replaced before" if gone else "")
                + (f"; {journal.not_due} no longer due" if journal.not_due else "")
            )
        latencies = [p.latency for p in journal.planted if p.latency is not None]
        if latencies:
            print(
                f"  I6: {len(journal.planted)} signal(s) planted, a disposition after median "
                f"{statistics.median(latencies):.1f}s, max {max(latencies):.1f}s"
            )
        if checker is not None:
            missed = ", ".join(f"{k} {v}" for k, v in sorted(checker.unanswered.items()))
            print(f"  {checker.polls} polls; sources that did not answer: {missed or 'none'}")
        print(f"  left behind: {', '.join(map(str, left)) if left else 'none'}")

        problems = list(journal.errors)
        if remediations == 0:
            problems.append("no remediation was ever opened")
        never = [k for k in drawn if fired_kinds[k] and not took[k]]
        if never:
            problems.append(f"fault kinds that never took effect: {', '.join(never)}")
        if not journal.checks["I1"] or not journal.checks["I5"]:
            problems.append("the checker never read the API and Kubernetes together")
        if left:
            problems.append(f"{len(left)} process(es) left behind (killed now)")
        if self.interrupted:
            problems.append("interrupted")
        for problem in problems:
            print(f"soak: FAILED: {problem.splitlines()[0]}")
        faults = sum(took.values())
        violations = len(journal.violations)
        print(
            f"soak: {faults} faults, {remediations} remediations, {violations} invariant "
            f"violations (seed {self.args.seed}, {self.args.minutes:g} min)",
            flush=True,
        )
        if violations:
            return EXIT_VIOLATION
        return EXIT_PATH if problems else 0


def main(argv: list[str]) -> int:
    args = parse(argv)
    try:
        kinds = parse_kinds(args.faults, args.db)
        if args.minutes <= 0 or args.nodes < 8:
            raise UsageError("--minutes must be positive and --nodes at least 8")
    except UsageError as exc:
        print(f"soak: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.plan:
        schedule: tuple[Planned, ...] = draw(args.seed, args.minutes, kinds)
        print(f"soak: schedule {digest(schedule)}, {len(schedule)} faults")
        for planned in schedule:
            print(f"  {planned.line()}")
        return 0
    return Soak(args, kinds).run()

"""`remediator policy validate DIR` and `remediator policy test DIR SCENARIO...`: what CI runs on
every policy pull request."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from remediator.errors import PolicyError
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.policy.scenario import load_scenarios, run_scenario


def register(subparsers: Any) -> Any:
    """Adds `policy` and returns its action subparsers, where the CLI root adds `backtest`."""
    parser = subparsers.add_parser("policy", help="validate and test remediation policies")
    sub = parser.add_subparsers(dest="policy_command", metavar="ACTION", required=True)
    validate = sub.add_parser("validate", help="check a policy directory; list every problem")
    validate.add_argument("directory", type=Path)
    validate.set_defaults(func=_validate)
    test = sub.add_parser("test", help="run scenario files against a policy directory")
    test.add_argument("directory", type=Path)
    test.add_argument("scenarios", type=Path, nargs="+")
    test.set_defaults(func=_test, walk=None)  # the CLI root passes the planner's walk
    return sub


def summary(policy_set: PolicySet) -> str:
    commit = policy_set.commit[:12] if policy_set.commit else "no git"
    if policy_set.commit and policy_set.dirty:
        commit += " (dirty)"
    return (
        f"{policy_set.source_dir}: {len(policy_set.policies)} policies in "
        f"{len(policy_set.files)} files, sha256 {policy_set.content_hash[:12]}, commit {commit}"
    )


def _load(directory: Path) -> PolicySet | None:
    try:
        policy_set = load_policy_dir(directory)
    except PolicyError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"{directory}: {len(exc.problems)} problem(s); policy set refused", file=sys.stderr)
        return None
    for warning in policy_set.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return policy_set


def _validate(args: argparse.Namespace) -> int:
    policy_set = _load(args.directory)
    if policy_set is None:
        return 1
    print(summary(policy_set))
    return 0


def _test(args: argparse.Namespace) -> int:
    policy_set = _load(args.directory)
    if policy_set is None:
        return 1
    passed = failed = 0
    for path in args.scenarios:
        try:
            scenarios = load_scenarios(path)
        except (PolicyError, OSError) as exc:
            problems = exc.problems if isinstance(exc, PolicyError) else [f"{path}: {exc}"]
            for problem in problems:
                print(problem, file=sys.stderr)
            failed += 1
            continue
        for scenario in scenarios:
            for outcome in run_scenario(scenario, policy_set, args.walk):
                print(f"{path.name}: {outcome.line()}")
                if outcome.passed:
                    passed += 1
                else:
                    failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0

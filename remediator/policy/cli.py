"""`remediator policy validate DIR` and `remediator policy test DIR SCENARIO...`: what CI runs on
every policy pull request."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from remediator.errors import PolicyError
from remediator.model.gpus import KNOWN_MODELS
from remediator.policy.floors import floor_gaps
from remediator.policy.loader import PolicySet, load_policy_dir
from remediator.policy.scenario import load_scenarios, run_scenario


def register(subparsers: Any) -> Any:
    """Adds `policy` and returns its action subparsers, where the CLI root adds `backtest`."""
    parser = subparsers.add_parser("policy", help="validate and test remediation policies")
    sub = parser.add_subparsers(dest="policy_command", metavar="ACTION", required=True)
    validate = sub.add_parser("validate", help="check a policy directory; list every problem")
    validate.add_argument("directory", type=Path)
    validate.add_argument(
        "--gpu-model",
        action="append",
        dest="gpu_models",
        metavar="MODEL",
        help="a GPU model your pools run (as nvidia-smi or the nvidia.com/gpu.product label "
        "names it; repeat it): warn about validations without an NCCL floor for it, instead of "
        f"the known models ({', '.join(KNOWN_MODELS)}). `remediator doctor` checks the models "
        "your pools' nodes really carry",
    )
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


def floor_warnings(policy_set: PolicySet, models: Sequence[str] | None) -> list[str]:
    """A line per validate step without an NCCL floor for one of `models` (the known models
    when none are given): a warning, not a problem, since such a check is skipped, and this
    command cannot see which models the cluster's pools run."""
    against = list(models) if models else list(KNOWN_MODELS)
    whose = "the given models" if models else "the known models; this command cannot see your pools"
    lines = []
    for gap in floor_gaps(policy_set.policies, against):
        origin = policy_set.origins.get(gap.policy)
        where = f"{origin.file}:{origin.first_line}: " if origin else ""
        lines.append(
            f"{where}{gap.describe()} (of {whose}): validations of those models skip the NCCL "
            "check; `remediator doctor` lists the pools affected"
        )
    return lines


def _validate(args: argparse.Namespace) -> int:
    policy_set = _load(args.directory)
    if policy_set is None:
        return 1
    for line in floor_warnings(policy_set, args.gpu_models):
        print(f"warning: {line}", file=sys.stderr)
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

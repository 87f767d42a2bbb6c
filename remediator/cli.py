"""The `remediator` command: each subcommand lives beside the code it drives."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module exposes `register(subparsers)`, which adds its subcommand and sets
# `func(args) -> int` as the parser default.
COMMAND_MODULES: tuple[str, ...] = (
    "remediator.policy.cli",
    "remediator.store.cli",
    "remediator.sim.cli",
    "remediator.controller.cli",
    "remediator.demo.cli",
    "remediator.agent.cli",
    "remediator.backtest.cli",
    "remediator.web.console_cli",
    "remediator.doctor.cli",
    "remediator.shadow.cli",
    "remediator.remediation.optout_cli",
)
# Actions added under another module's command, wired here so that neither module imports the
# other: (the parent's module, the child's module, its function taking the parent's subparsers).
NESTED: tuple[tuple[str, str, str], ...] = (
    ("remediator.policy.cli", "remediator.backtest.cli", "add_backtest"),
    ("remediator.policy.cli", "remediator.remediation.walk", "add_walk"),
)
# Each command's module: `remediator sim inject …` builds a parser from its own module (and
# those nested under it) instead of importing every command's stack — the agent on every node,
# and each CLI call, would otherwise pay seconds of imports (the backtest's alone ~2 s quiet).
# A unit test checks this against what the modules register. `--help` or an unknown command
# builds the whole parser.
COMMAND_OF: dict[str, str] = {
    "policy": "remediator.policy.cli",
    "db": "remediator.store.cli",
    "sim": "remediator.sim.cli",
    "run": "remediator.controller.cli",
    "demo": "remediator.demo.cli",
    "agent": "remediator.agent.cli",
    "signals": "remediator.backtest.cli",
    "console": "remediator.web.console_cli",
    "doctor": "remediator.doctor.cli",
    "report": "remediator.shadow.cli",
    "optout": "remediator.remediation.optout_cli",
}


def build_parser(modules: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remediator", description="Automated GPU node health and remediation."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in modules:
        actions = importlib.import_module(name).register(sub)
        for parent, child, function in NESTED:
            if parent == name:
                getattr(importlib.import_module(child), function)(actions)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    own = COMMAND_OF.get(given[0]) if given else None
    args = build_parser((own,) if own else COMMAND_MODULES).parse_args(given)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())

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
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remediator", description="Automated GPU node health and remediation."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())

"""`remediator doctor --config F`: will this controller work here. Exit 0 when every check
passes, 1 with warnings, 2 with failures (or a config that does not load)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from remediator.errors import RemediatorError
from remediator.settings import load_settings


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor", help="check the cluster, telemetry, provider and store (reads only)"
    )
    parser.add_argument("--config", type=Path, help="the controller's YAML settings file")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds each check may take before it is a failure (default 10)",
    )
    parser.set_defaults(func=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except RemediatorError as exc:
        if args.format == "json":
            print(json.dumps({"status": "fail", "exit_code": 2, "error": str(exc)}))
        else:
            print(f"FAIL  config: {exc}", file=sys.stderr)
        return 2
    from remediator.doctor.run import doctor

    report = doctor(settings, args.timeout)
    print(report.to_json() if args.format == "json" else report.to_text())
    return report.exit_code

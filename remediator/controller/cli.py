"""`remediator run`: the controller process."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from remediator.controller.heap import ScheduledCollections, limit_malloc_arenas
from remediator.controller.logging import configure_logging
from remediator.errors import RemediatorError
from remediator.settings import load_settings
from remediator.store.db import check

log = logging.getLogger(__name__)

SWITCH_INTERVAL_SECONDS = 0.001


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("run", help="run the controller (and its web console)")
    parser.add_argument("--config", type=Path, help="the YAML settings file")
    parser.add_argument(
        "--ready-file",
        type=Path,
        help="written (JSON: web_url, identity, pid) once the console listens",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except RemediatorError as exc:
        print(f"remediator run: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_format)
    # The web thread's event loop takes the GIL once per turn; while the leader's thread opens
    # a storm's remediations it waited up to the default 5 ms each time, and pushes queued
    # behind it (bench scale_10k: push p99 4.4-4.6 s under load). Handing the GIL on after
    # 1 ms keeps the push API answering while the decisions run.
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    if not limit_malloc_arenas():
        log.info("the C library is not glibc: its malloc arenas are as it sets them")
    # Imported here: building the parser must not pay for the whole controller.
    from remediator.controller.app import Controller

    stop = threading.Event()
    ScheduledCollections(stop).start()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        stop.set()

    try:
        check(settings.database_url)
        controller = Controller(settings)
    except RemediatorError as exc:
        log.error("cannot start: %s", exc)
        return 1
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    from remediator.doctor.run import warn_at_start

    warn_at_start(settings)
    try:
        controller.run(stop, args.ready_file)
    except RemediatorError as exc:
        log.error("cannot start: %s", exc)
        print(f"remediator run: {exc}", file=sys.stderr)
        return 1
    return 0

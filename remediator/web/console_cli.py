"""`remediator console`: the fleet console over a shared database, with no kubeconfig."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "console",
        help="serve the console and API for every cluster of a shared database (no kubeconfig)",
    )
    parser.add_argument(
        "--config", type=Path, help="the YAML settings (database_url and web: are read)"
    )
    parser.add_argument(
        "--ready-file", type=Path, help="written (JSON: web_url, pid) once the console listens"
    )
    parser.set_defaults(func=_console)


def _console(args: argparse.Namespace) -> int:
    # Imported here: building the parser must not pay for the web stack.
    import uvicorn

    from remediator.controller.app import split_listen
    from remediator.controller.logging import configure_logging
    from remediator.errors import RemediatorError
    from remediator.settings import load_settings
    from remediator.store.db import check, make_engine
    from remediator.web.fleet import Fleet, create_fleet_app
    from remediator.web.server import QuietServer

    try:
        settings = load_settings(args.config)
        host, port = split_listen(settings.web.listen)
        check(settings.database_url)
    except RemediatorError as exc:
        print(f"remediator console: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_format)
    engine = make_engine(settings.database_url)
    fleet = Fleet(settings, engine)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        print(f"remediator console: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return 1
    sock.listen(128)
    config = uvicorn.Config(create_fleet_app(fleet), log_config=None, access_log=False)
    server = QuietServer(config)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        server.request_exit()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="web", daemon=True
    )
    thread.start()
    try:
        if not _wait_started(server, thread):
            print("remediator console: the web server did not start", file=sys.stderr)
            return 1
        bound_host, bound_port = sock.getsockname()[:2]
        shown = f"[{bound_host}]" if family == socket.AF_INET6 else bound_host
        web_url = f"http://{shown}:{bound_port}"
        if args.ready_file is not None:
            body = {"web_url": web_url, "pid": os.getpid()}
            temp = args.ready_file.with_suffix(".tmp")
            temp.write_text(json.dumps(body))
            temp.replace(args.ready_file)
        log.info("fleet console serving on %s", web_url)
        while not stop.wait(1.0) and thread.is_alive():
            pass
    finally:
        server.request_exit()
        thread.join(timeout=10)
        engine.dispose()
    return 0


def _wait_started(server: Any, thread: threading.Thread) -> bool:
    """Until uvicorn says it listens, or its thread ends (a port in use, say)."""
    while thread.is_alive():
        if server.started:
            return True
        thread.join(timeout=0.05)
    return False

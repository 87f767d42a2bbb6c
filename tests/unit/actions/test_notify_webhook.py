"""The webhook notifier against a real loopback HTTP server: delivered when it answers 2xx,
logged and never raised when it refuses, is down or is too slow."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from remediator.actions.notify import Notification, NotificationKind, WebhookNotifier
from remediator.settings import NotifySettings

NOTE = Notification(NotificationKind.STARTED, "rem-1", "gpu-1", "xid 79: replacing the node")


class Hook(ThreadingHTTPServer):
    status = 200
    delay = 0.0

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.received: list[dict[str, object]] = []


class Handler(BaseHTTPRequestHandler):
    server: Hook

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        self.server.received.append(json.loads(self.rfile.read(length)))
        time.sleep(self.server.delay)
        self.send_response(self.server.status)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def url(server: Hook) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/hook"


def test_delivers_slack_json(hook: Hook) -> None:
    assert WebhookNotifier(url(hook)).send(NOTE)
    assert hook.received[0]["text"] == (
        ":wrench: Remediation started: node gpu-1 — xid 79: replacing the node"
    )


def test_refusal_is_logged_not_raised(hook: Hook, caplog: pytest.LogCaptureFixture) -> None:
    hook.status = 500
    with caplog.at_level(logging.WARNING):
        assert not WebhookNotifier(url(hook)).send(NOTE)
    assert "refused: 500" in caplog.text


def test_slow_webhook_times_out(hook: Hook, caplog: pytest.LogCaptureFixture) -> None:
    hook.delay = 1.0
    with caplog.at_level(logging.WARNING):
        assert not WebhookNotifier(url(hook), timeout=0.2).send(NOTE)
    assert "ReadTimeout" in caplog.text


def test_unreachable_webhook(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with caplog.at_level(logging.WARNING):
        assert not WebhookNotifier(f"http://127.0.0.1:{port}/").send(NOTE)
    assert "ConnectError" in caplog.text


def test_from_settings() -> None:
    assert WebhookNotifier.from_settings(NotifySettings()) is None
    assert (
        WebhookNotifier.from_settings(NotifySettings(webhook_url="http://127.0.0.1:1/")) is not None
    )

"""Delivery against a replica that does not lead: every retry opens a new connection, because
the Service balances connections — a kept-alive one would reach the same follower forever."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from remediator.agent.http import HttpClient
from remediator.agent.push import Pusher
from remediator.agent.queue import DurableQueue
from remediator.agent.stats import Stats


class Follower(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps connections alive unless told otherwise
    peers: list[int] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        Follower.peers.append(self.client_address[1])
        body = b'{"detail": "this replica does not lead"}'
        self.send_response(503)
        self.send_header("Retry-After", "5")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def follower() -> Iterator[str]:
    Follower.peers = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Follower)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_refusing_replica_is_left_for_a_new_connection(follower: str, tmp_path: Path) -> None:
    queue = DurableQueue(tmp_path / "agent.db")
    queue.commit([{"node": "n", "kind": "xid"}], {"position": "1"})
    stats = Stats()
    pusher = Pusher(HttpClient(follower), queue, stats)
    assert pusher.send_once() == 5.0  # Retry-After
    assert pusher.send_once() == 5.0
    assert len(Follower.peers) == 2 and Follower.peers[0] != Follower.peers[1]
    assert len(queue) == 1 and stats.get("push_errors") == 2
    queue.close()


class PartlyRefusing(BaseHTTPRequestHandler):
    """The push API's answer to a batch with one item too old: 202, the rest taken."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        refused = {"index": 0, "field": "observed_at", "reason": "older than 300 s"}
        body = json.dumps({"accepted": 1, "refused": [refused]}).encode()
        self.send_response(202)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_an_item_refused_inside_an_accepted_batch_is_logged_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """#22 item 6: a 202 that refused an item counted it as sent and deleted it without a word."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), PartlyRefusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    queue = DurableQueue(tmp_path / "agent.db")
    try:
        queue.commit(
            [{"node": "n", "kind": "xid", "code": 79}, {"node": "n", "kind": "xid", "code": 13}],
            {"position": "1"},
        )
        stats = Stats()
        pusher = Pusher(HttpClient(f"http://127.0.0.1:{server.server_address[1]}"), queue, stats)
        with caplog.at_level(logging.ERROR, logger="remediator.agent.push"):
            assert pusher.send_once() == 0.0
        assert (stats.get("signals_refused"), stats.get("signals_sent")) == (1, 1)
        (record,) = caplog.records
        assert '"code":79' in record.getMessage() and "older than 300 s" in record.getMessage()
        assert len(queue) == 0
    finally:
        queue.close()
        server.shutdown()

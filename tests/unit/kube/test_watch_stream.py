"""KubeClient's node watch on the wire: events line by line, and a 410 Gone — at open or as an
in-stream ERROR event, the way the API server sends it — is ResourceExpired (the informer then
lists afresh)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from remediator.kube.client import KubeClient, ResourceExpired

Handler = Callable[[BaseHTTPRequestHandler], None]

GONE = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[Handler], KubeClient]]:
    servers: list[ThreadingHTTPServer] = []
    clients: list[KubeClient] = []

    def start(handle: Handler) -> KubeClient:
        class _Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                handle(self)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        config = tmp_path / f"kubeconfig-{len(servers)}"
        config.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
            f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{server.server_port}'}}}}]\n"
            "users: [{name: u, user: {token: t}}]\n"
            "contexts: [{name: t, context: {cluster: c, user: u}}]\n"
        )
        client = KubeClient.from_kubeconfig(config, timeout=5.0)
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.close()
    for server in servers:
        server.shutdown()
        server.server_close()


def stream(*events: dict[str, Any], status: int = 200) -> Handler:
    def handle(request: BaseHTTPRequestHandler) -> None:
        body = b"".join(json.dumps(e).encode() + b"\n" for e in events)
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)

    return handle


def node(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}}


def test_events_arrive_in_order_then_an_in_stream_410_is_expired(
    serve: Callable[[Handler], KubeClient],
) -> None:
    client = serve(
        stream(
            {"type": "ADDED", "object": node("a", "5")},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
            {"type": "ERROR", "object": GONE},
        )
    )
    seen: list[str] = []
    with pytest.raises(ResourceExpired, match="410"):
        for event in client.watch_nodes("3").events():
            seen.append(event["type"])
    assert seen == ["ADDED", "BOOKMARK"]


def test_a_410_answer_at_open_is_expired(serve: Callable[[Handler], KubeClient]) -> None:
    client = serve(stream(GONE, status=410))
    with pytest.raises(ResourceExpired):
        client.watch_nodes("3")

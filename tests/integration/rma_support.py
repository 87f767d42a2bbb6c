"""A ticket system for the RMA tests: a real HTTP server that takes the webhook's posts."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class TicketSystem:
    """A webhook receiver that refuses its first `refuse` posts with 503, then takes them."""

    def __init__(self, refuse: int) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.refused = 0
        self.got = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if outer.refused < refuse:
                    outer.refused += 1
                    self.send_response(503)
                else:
                    outer.bodies.append(body)
                    outer.got.set()
                    self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/rma"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=30)

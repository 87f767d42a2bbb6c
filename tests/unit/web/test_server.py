"""The console's server without uvicorn's 0.1 s tick still dates its answers and stops when
asked from another thread."""

from __future__ import annotations

import socket
import threading
from email.utils import parsedate_to_datetime

import httpx
import uvicorn
from fastapi import FastAPI

from remediator.web.server import QuietServer


def test_serves_dated_answers_and_stops_when_asked() -> None:
    app = FastAPI()

    @app.get("/ping")
    def ping() -> dict[str, str]:
        return {"pong": "yes"}

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    port = sock.getsockname()[1]
    server = QuietServer(uvicorn.Config(app, log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        answer = None
        for _ in range(200):
            try:
                answer = httpx.get(f"http://127.0.0.1:{port}/ping", timeout=5)
                break
            except httpx.ConnectError:
                thread.join(0.05)  # not listening yet
        assert answer is not None and answer.json() == {"pong": "yes"}
        assert parsedate_to_datetime(answer.headers["date"]).tzinfo is not None
    finally:
        server.request_exit()
        thread.join(timeout=30)
    assert not thread.is_alive()


def test_an_exit_asked_before_the_loop_runs_is_kept() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    server = QuietServer(uvicorn.Config(FastAPI(), log_config=None))
    server.request_exit()
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()

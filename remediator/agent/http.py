"""A small HTTP/1.1 client on the standard library, for the agent alone.

httpx would pull in its command-line extras (rich, click) and ~10 MB of resident memory on
every GPU node; the agent needs only JSON POSTs and one GET over a kept-alive connection, with
timeouts, TLS with a CA file, and one clear error for "the server could not be reached".
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


class TransportError(Exception):
    """No HTTP answer: refused, reset, timed out, or TLS failed."""


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)


class HttpClient:
    """One kept-alive connection per client, reopened after any failure; thread-safe."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float = 5.0,
        ca_file: str | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port or (443 if self._https else 80)
        self._prefix = parts.path.rstrip("/")
        self._headers = {"User-Agent": "remediator-agent", **(headers or {})}
        self._timeout = timeout
        self._context = ssl.create_default_context(cafile=ca_file) if self._https else None
        self._conn: http.client.HTTPConnection | None = None
        self._lock = threading.Lock()

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            if self._context is not None:
                self._conn = http.client.HTTPSConnection(
                    self._host, self._port, timeout=self._timeout, context=self._context
                )
            else:
                self._conn = http.client.HTTPConnection(
                    self._host, self._port, timeout=self._timeout
                )
        return self._conn

    def request(self, method: str, path: str, body: Any = None) -> Response:
        payload = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = dict(self._headers)
        if payload is not None:
            headers["Content-Type"] = "application/json"
        with self._lock:
            # A kept-alive connection the server closed fails on first use: try once more.
            for attempt in (0, 1):
                conn = self._connection()
                try:
                    conn.request(method, self._prefix + path, body=payload, headers=headers)
                    answer = conn.getresponse()
                    data = answer.read()
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()
                    self._conn = None
                    retry = attempt == 0 and isinstance(
                        exc, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)
                    )
                    if retry:
                        continue
                    raise TransportError(f"{method} {path}: {_describe(exc)}") from exc
                if answer.will_close:
                    conn.close()
                    self._conn = None
                return Response(answer.status, {k.lower(): v for k, v in answer.getheaders()}, data)
        raise AssertionError("unreachable")

    def post(self, path: str, body: Any) -> Response:
        return self.request("POST", path, body)

    def get(self, path: str) -> Response:
        return self.request("GET", path)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout | TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__

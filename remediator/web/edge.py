"""The console's edge, before any route runs: request bodies capped before they are parsed,
and the headers every answer carries.

The cap is checked twice: a declared Content-Length past the limit is refused at once, and a
body sent without one (chunked) is counted as it streams in, so a client cannot make the
server buffer more than the limit by not saying how much it sends.
"""

from __future__ import annotations

import json

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

NO_STORE_EXEMPT = ("/static/",)


def too_large_reason(limit: int) -> str:
    return f"request body larger than {limit} bytes"


class BodyLimit:
    """413 past `limit` bytes of request body, declared or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            status = 413 if declared.isdigit() else 400
            reason = too_large_reason(self.limit) if status == 413 else "bad Content-Length"
            await _answer(send, status, reason)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    # Raised inside the route's body read, so the app's error handler answers
                    # (FastAPI passes HTTPException through its body parsing unchanged).
                    raise HTTPException(413, too_large_reason(self.limit))
            return message

        await self.app(scope, counted, send)


async def _answer(send: Send, status: int, reason: str) -> None:
    body = json.dumps({"reason": reason, "detail": None}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})

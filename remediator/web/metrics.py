"""The console's own metrics: HTTP requests by route, method and code with their latency,
commands by outcome, refused logins and requests, pushed signals refused."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from remediator.signals.model import Signal

# Pages and API answers take milliseconds; a slow database or a big page, seconds.
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class ConsoleMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.commands = Counter(
            "remediator_console_commands",
            "On-call commands received through the console or API, by outcome.",
            ["command", "outcome"],
            registry=registry,
        )
        self.auth_failures = Counter(
            "remediator_console_auth_failures",
            "Refused logins and requests: login (unknown token), unauthenticated (no or "
            "unknown token), forbidden (role or CSRF).",
            ["kind"],
            registry=registry,
        )
        self.http = Histogram(
            "remediator_http_request_duration_seconds",
            "HTTP requests by route template, method and status code, with their latency (the "
            "histogram's _count is the number of requests).",
            ["route", "method", "code"],
            buckets=HTTP_BUCKETS,
            registry=registry,
        )
        self.push_refused = Counter(
            "remediator_push_signals_refused",
            "Pushed signals refused (POST /api/v1/signals), by the first field named: a sender "
            "that keeps them (the node agent logs each at error) still shows here.",
            ["field"],
            registry=registry,
        )

    def count_refused(self, problems: Sequence[dict[str, Any]]) -> None:
        """One per refused item; the label is a Signal field or `body`/`other`, never the
        sender's own text."""
        first: dict[Any, str] = {}
        for problem in problems:
            field = str(problem.get("field", "")).partition(".")[0]
            known = field in Signal.model_fields or field == "body"
            first.setdefault(problem.get("index"), field if known else "other")
        for field in first.values():
            self.push_refused.labels(field).inc()

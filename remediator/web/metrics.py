"""The console's own metrics: commands by outcome, refused logins and requests."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


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

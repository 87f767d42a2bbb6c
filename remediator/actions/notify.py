"""Notify: tell owners and on-call what remediator did, as Slack-compatible webhook JSON.

A notification is a courtesy, never a gate: a webhook that is down, slow or refusing is logged and
the remediation carries on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpx

from remediator.settings import NotifySettings

log = logging.getLogger(__name__)


class NotificationKind(StrEnum):
    STARTED = "started"
    HELD = "held"
    QUEUED = "queued"
    FAILED = "failed"
    SUCCEEDED = "succeeded"
    BREAKER_TRIPPED = "breaker_tripped"
    OPT_OUT_ESCALATED = "opt_out_escalated"


_HEADLINE = {
    NotificationKind.STARTED: ":wrench: Remediation started",
    NotificationKind.HELD: ":raised_hand: Remediation held, waiting for a human",
    NotificationKind.QUEUED: ":hourglass: Remediation queued: waiting for budget",
    NotificationKind.FAILED: ":x: Remediation failed",
    NotificationKind.SUCCEEDED: ":white_check_mark: Remediation succeeded",
    NotificationKind.OPT_OUT_ESCALATED: (
        ":rotating_light: A faulty node has been held by an opt-out too long: on-call decides"
    ),
    NotificationKind.BREAKER_TRIPPED: (
        ":rotating_light: Storm breaker tripped: every new remediation is paused until a human "
        "resets it"
    ),
}


@dataclass(frozen=True)
class Notification:
    kind: NotificationKind
    remediation_id: str
    node: str
    summary: str
    policy: str = ""
    cluster: str = ""
    link: str | None = None
    fields: dict[str, str] = field(default_factory=dict)


def escape(text: str) -> str:
    """Slack's mrkdwn escaping: node names, reasons and API messages come from outside, and an
    unescaped `<!channel>` or `<https://…|label>` in them would page everyone or disguise a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render(note: Notification) -> dict[str, Any]:
    """Slack's message shape (`text` is the fallback for clients without blocks)."""
    headline = _HEADLINE[note.kind]
    summary = escape(note.summary)
    # A cluster-wide note (the breaker) names no node and no remediation.
    subject = f": node {escape(note.node)}" if note.node else ""
    text = f"{headline}{subject} — {summary}"
    facts = {k: v for k, v in (("Node", note.node), ("Remediation", note.remediation_id)) if v}
    if note.cluster:
        facts["Cluster"] = note.cluster
    if note.policy:
        facts["Policy"] = note.policy
    facts.update(note.fields)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": headline, "emoji": True}},
        {"type": "section", "text": {"type": "mrkdwn", "text": summary}},
        {
            "type": "section",
            "fields": [
                {"type": "mrkdwn", "text": f"*{escape(k)}*\n{escape(v)}"} for k, v in facts.items()
            ][:10],
        },
    ]
    if note.link:
        blocks.append(
            {
                "type": "context",
                "elements": [{"type": "mrkdwn", "text": f"<{note.link}|Open the timeline>"}],
            }
        )
    return {"text": text, "blocks": blocks}


class WebhookNotifier:
    def __init__(
        self, url: str, timeout: float = 5.0, transport: httpx.BaseTransport | None = None
    ) -> None:
        self._url = url
        self._http = httpx.Client(timeout=timeout, transport=transport)

    @classmethod
    def from_settings(cls, settings: NotifySettings) -> WebhookNotifier | None:
        """None when no webhook is configured."""
        if not settings.webhook_url:
            return None
        return cls(settings.webhook_url, settings.timeout_seconds)

    def close(self) -> None:
        self._http.close()

    def send(self, note: Notification) -> bool:
        """Post it; False (and a log line) on any failure, never an exception."""
        try:
            response = self._http.post(self._url, json=render(note))
        except httpx.HTTPError as exc:
            log.warning(
                "notify %s for %s failed: %s: %s",
                note.kind.value,
                note.remediation_id,
                type(exc).__name__,
                exc,
            )
            return False
        if response.is_success:
            return True
        log.warning(
            "notify %s for %s refused: %s %s",
            note.kind.value,
            note.remediation_id,
            response.status_code,
            response.text[:200],
        )
        return False

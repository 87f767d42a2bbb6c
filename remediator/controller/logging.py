"""Structured logs: one JSON object per line (time, level, msg, logger, and the context a line
carries: remediation_id, node, state, policy; a transition adds from_state, to_state, action,
reason, seconds_in_state and actor), so that a log pipeline can follow a remediation
or a node without parsing prose."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

CONTEXT_FIELDS = (
    "remediation_id",
    "node",
    "state",
    "policy",
    "source",
    "identity",
    "from_state",
    "to_state",
    "action",
    "reason",
    "seconds_in_state",
    "actor",
)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "msg": record.getMessage(),
            "logger": record.name,
        }
        for name in CONTEXT_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        context = " ".join(
            f"{name}={getattr(record, name)}"
            for name in CONTEXT_FIELDS
            if getattr(record, name, None) is not None
        )
        line = super().format(record)
        return f"{line} {context}" if context else line


def configure_logging(fmt: str = "json", level: int = logging.INFO) -> None:
    """Replace the root handlers: logs go to stderr, in the configured format."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Access logs of every probe and scrape would drown the controller's own lines.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    # "skipped: maximum number of running instances" is the coalescing we asked for.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)

"""The controller's log lines are JSON objects carrying the remediation's context."""

from __future__ import annotations

import json
import logging
import sys

from remediator.controller.logging import JsonFormatter, TextFormatter


def record(**extra: object) -> logging.LogRecord:
    entry = logging.LogRecord(
        "remediator.test", logging.WARNING, __file__, 1, "held: %s", ("x",), None
    )
    for key, value in extra.items():
        setattr(entry, key, value)
    return entry


def test_json_lines_carry_time_level_message_and_context() -> None:
    line = JsonFormatter().format(record(remediation_id=7, node="n1", state="held", other="no"))
    entry = json.loads(line)
    assert entry["level"] == "warning" and entry["msg"] == "held: x"
    assert entry["remediation_id"] == 7 and entry["node"] == "n1" and entry["state"] == "held"
    assert entry["time"].endswith("+00:00") and "other" not in entry


def test_exceptions_are_kept_in_one_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        entry = record()
        entry.exc_info = sys.exc_info()
    line = JsonFormatter().format(entry)
    assert "\n" not in line and "ValueError: boom" in json.loads(line)["error"]


def test_text_lines_append_the_context() -> None:
    line = TextFormatter("%(levelname)s %(message)s").format(record(node="n1"))
    assert line == "WARNING held: x node=n1"
